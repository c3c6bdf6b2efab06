package ndjson

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/loopguard/loopguard/sse"
)

// lines reads all of r's lines and requires that their Raw joined is the
// stream.
func lines(t testing.TB, src io.Reader, want []byte, max int) (data []string, err error) {
	r := NewReader(src, max)
	var raw []byte
	for {
		ev, e := r.Next()
		if e != nil {
			if e != io.EOF {
				err = e
				raw = append(raw, r.Buffered()...)
			}
			break
		}
		raw = append(raw, ev.Raw...)
		data = append(data, string(ev.Data))
	}
	if err == nil && !bytes.Equal(raw, want) {
		t.Fatalf("relayed %q; want %q", raw, want)
	}
	return data, err
}

func TestReaderLines(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string
	}{
		{"lines", "{\"a\":1}\n{\"b\":2}\n", []string{`{"a":1}`, `{"b":2}`}},
		{"crlf and blank lines", "{\"a\":1}\r\n\n  \n{\"b\":2}\n", []string{`{"a":1}`, "", "", `{"b":2}`}},
		{"no final newline", "{\"a\":1}\n{\"done\":true}", []string{`{"a":1}`, `{"done":true}`}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
				got, err := lines(t, wrap(strings.NewReader(tt.give)), []byte(tt.give), 0)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Join(got, "|") != strings.Join(tt.want, "|") {
					t.Errorf("lines %q; want %q", got, tt.want)
				}
			}
		})
	}
}

func TestReaderTooLarge(t *testing.T) {
	give := "{\"a\":1}\n" + strings.Repeat("x", 5000) + "\n"
	_, err := lines(t, strings.NewReader(give), nil, 2048)
	if !errors.Is(err, sse.ErrEventTooLarge) {
		t.Fatalf("err = %v; want ErrEventTooLarge", err)
	}
}

// TestReaderGolden reads a recorded Ollama stream: every line, byte for byte.
func TestReaderGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/ollama-chat-tools.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	got, err := lines(t, iotest.HalfReader(bytes.NewReader(b)), b, 0)
	if err != nil || len(got) != bytes.Count(b, []byte("\n")) {
		t.Fatalf("%d lines, %v", len(got), err)
	}
}

// TestReaderLineAllocs: reading a line costs no allocation once the buffer
// has grown.
func TestReaderLineAllocs(t *testing.T) {
	line := []byte(`{"model":"tiny","created_at":"2026-11-27T12:00:00.1Z","message":{"role":"assistant","content":" the"},"done":false}` + "\n")
	src := &repeat{line: line}
	r := NewReader(src, 0)
	for range 100 {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = r.Next() }); n != 0 {
		t.Errorf("%v allocations a line; want 0", n)
	}
}

// repeat returns line again and again, a few lines a read.
type repeat struct {
	line []byte
	at   int
}

func (s *repeat) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		c := copy(b[n:], s.line[s.at:])
		n += c
		s.at = (s.at + c) % len(s.line)
	}
	return n, nil
}

// FuzzReader: any stream, split anywhere, is relayed byte for byte.
func FuzzReader(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":2}\n"), uint8(3))
	f.Add([]byte("{\"a\":1}\r\n\n{\"b\""), uint8(1))
	if b, err := os.ReadFile("testdata/ollama-chat-tools.ndjson"); err == nil {
		f.Add(b, uint8(7))
	}
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		src := io.Reader(bytes.NewReader(b))
		if n%2 == 1 {
			src = iotest.OneByteReader(src)
		}
		data, err := lines(t, src, b, 64+int(n))
		if err != nil {
			return // a line over the maximum: lines checked Buffered
		}
		for _, d := range data {
			if strings.Contains(d, "\n") {
				t.Fatalf("line data %q holds a newline", d)
			}
		}
	})
}
