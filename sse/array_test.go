package sse

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"
)

// readArray reads every event of an ArrayReader of rd.
func readArray(t testing.TB, rd io.Reader, max int) ([]Event, error) {
	t.Helper()
	r := NewArrayReader(rd, max)
	var evs []Event
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		ev.Raw, ev.Data = bytes.Clone(ev.Raw), bytes.Clone(ev.Data)
		evs = append(evs, ev)
	}
}

func TestArrayReader(t *testing.T) {
	stream, err := os.ReadFile("testdata/gemini/stream-array.json")
	if err != nil {
		t.Fatal(err)
	}
	var want []json.RawMessage
	if err := json.Unmarshal(stream, &want); err != nil {
		t.Fatal(err)
	}
	for name, rd := range map[string]io.Reader{
		"whole":        bytes.NewReader(stream),
		"byte by byte": iotest.OneByteReader(bytes.NewReader(stream)),
		"halves":       iotest.HalfReader(bytes.NewReader(stream)),
	} {
		t.Run(name, func(t *testing.T) {
			evs, err := readArray(t, rd, 0)
			if err != nil {
				t.Fatal(err)
			}
			var raw []byte
			var got [][]byte
			for _, ev := range evs {
				raw = append(raw, ev.Raw...)
				if ev.Data != nil {
					got = append(got, ev.Data)
				}
				if ev.Partial {
					t.Errorf("partial event %q", ev.Raw)
				}
			}
			if !bytes.Equal(raw, stream) {
				t.Errorf("events' Raw = %q; want the stream %q", raw, stream)
			}
			if len(got) != len(want) {
				t.Fatalf("%d elements; want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("element %d = %s; want %s", i, got[i], want[i])
				}
			}
			if last := evs[len(evs)-1]; last.Data != nil || !bytes.HasSuffix(last.Raw, []byte("]")) {
				t.Errorf("last event %q; want the closing bracket without data", last.Raw)
			}
		})
	}
}

func TestArrayReaderEnds(t *testing.T) {
	tests := []struct {
		name, give  string
		wantData    []string
		wantPartial bool
	}{
		{"empty array", "[]", nil, false},
		{"cut off in an element", `[{"a":1},{"b":"}`, []string{`{"a":1}`, `{"b":"}`}, true},
		{"bytes after the array", "[{}]\n", []string{"{}"}, false},
		{"strings and brackets in strings", `[{"a":"]}\"["}]`, []string{`{"a":"]}\"["}`}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := readArray(t, iotest.OneByteReader(bytes.NewReader([]byte(tt.give))), 0)
			if err != nil {
				t.Fatal(err)
			}
			var raw []byte
			var data []string
			partial := false
			for _, ev := range evs {
				raw = append(raw, ev.Raw...)
				if ev.Data != nil {
					data = append(data, string(ev.Data))
				}
				partial = partial || ev.Partial
			}
			if string(raw) != tt.give || len(data) != len(tt.wantData) || partial != tt.wantPartial {
				t.Fatalf("Raw %q, Data %q, partial %v; want %q, %q, %v", raw, data, partial, tt.give, tt.wantData, tt.wantPartial)
			}
			for i := range data {
				if data[i] != tt.wantData[i] {
					t.Errorf("Data[%d] = %s; want %s", i, data[i], tt.wantData[i])
				}
			}
		})
	}
}

func TestArrayReaderTooLarge(t *testing.T) {
	_, err := readArray(t, bytes.NewReader([]byte(`[{"a":"`+string(bytes.Repeat([]byte("x"), 4096))+`"}]`)), 1024)
	if !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("err = %v; want ErrEventTooLarge", err)
	}
}

// FuzzArrayReader: any bytes, read in any pieces, come back whole in the
// events' Raw, and each Data is inside its Raw.
func FuzzArrayReader(f *testing.F) {
	if b, err := os.ReadFile("testdata/gemini/stream-array.json"); err == nil {
		f.Add(b, false)
	}
	f.Add([]byte(`[{"a":"\\"},{}]`), true)
	f.Fuzz(func(t *testing.T, stream []byte, oneByte bool) {
		var rd io.Reader = bytes.NewReader(stream)
		if oneByte {
			rd = iotest.OneByteReader(rd)
		}
		evs, err := readArray(t, rd, 1<<20)
		if err != nil {
			return
		}
		var raw []byte
		for _, ev := range evs {
			raw = append(raw, ev.Raw...)
			if ev.Data != nil && !bytes.HasSuffix(ev.Raw, ev.Data) {
				t.Fatalf("Data %q is not the end of Raw %q", ev.Data, ev.Raw)
			}
		}
		if !bytes.Equal(raw, stream) {
			t.Fatalf("Raw = %q; want %q", raw, stream)
		}
	})
}
