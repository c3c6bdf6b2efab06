package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func addFixtureSeeds(f *testing.F) {
	for _, file := range fixtures(f) {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) > 8<<10 {
			continue // the long-arguments stream slows every run
		}
		f.Add(b, uint8(0))
		f.Add(b, uint8(3))
	}
}

// addReaderSeeds adds the fixtures and the line endings that end a read
// halfway, each with a split for readSizes.
func addReaderSeeds(f *testing.F) {
	addFixtureSeeds(f)
	f.Add([]byte("data: a\r\n\r\ndata: b\r"), uint8(1))
	f.Add([]byte(bom+"\r\r\n:\n"), uint8(2))
}

// readSizes is the cycle of read sizes that split picks for a chunkReader.
func readSizes(split uint8) []int { return []int{int(split%17) + 1, int(split/17) + 1} }

// FuzzReader checks that the Reader never panics, that the Raw of its
// events add up to the input byte for byte whatever the read sizes, and that
// its buffer never grows past max.
func FuzzReader(f *testing.F) {
	addReaderSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		const max = 256
		sizes := readSizes(split)
		r := NewReader(&chunkReader{b: in, sizes: sizes}, max)
		var raw []byte
		for {
			e, err := r.Next()
			if cap(r.buf) > max {
				t.Fatalf("buffer %d bytes; max %d", cap(r.buf), max)
			}
			if err == io.EOF {
				break
			}
			if errors.Is(err, ErrEventTooLarge) {
				// The fallback path: what is buffered plus the rest.
				rest, _ := io.ReadAll(r.rd)
				raw = append(append(raw, r.Buffered()...), rest...)
				break
			}
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if len(e.Raw) == 0 || len(e.Raw) > max {
				t.Fatalf("event Raw of %d bytes", len(e.Raw))
			}
			if e.Data != nil && !bytes.Contains(e.Raw, []byte("data")) {
				t.Fatalf("Data %q from Raw %q", e.Data, e.Raw)
			}
			raw = append(raw, e.Raw...)
		}
		if !bytes.Equal(raw, in) {
			t.Fatalf("Raw concatenation %q; want %q", raw, in)
		}
	})
}

// FuzzReaderWouldBlock: through a reader that has nothing (ErrWouldBlock)
// before each of its reads, whatever the input and the read sizes, the
// Reader returns the events, and ends with the error, that it does through
// one that waits.
func FuzzReaderWouldBlock(f *testing.F) {
	addReaderSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		const max = 256
		sizes := readSizes(split)
		want, wantErr := readAll(t, &chunkReader{b: in, sizes: sizes}, max)
		r := NewReader(&blockingReader{r: &chunkReader{b: in, sizes: sizes}}, max)
		var got []ev
		var err error
		for blocked := 0; ; {
			var e Event
			if e, err = r.Next(); err == ErrWouldBlock {
				if blocked++; blocked > 2*len(in)+2 {
					t.Fatalf("ErrWouldBlock %d times for %d bytes", blocked, len(in))
				}
				continue
			}
			if err != nil {
				break
			}
			got = append(got, summarize(e))
		}
		if !slices.Equal(got, want) || err != wantErr {
			t.Fatalf("through ErrWouldBlock: %d events, %v; without: %d events, %v", len(got), err, len(want), wantErr)
		}
	})
}

// FuzzAccumulator feeds every event of the input to a ChatAccumulator: it
// must not panic, and what it reports must be consistent.
func FuzzAccumulator(f *testing.F) {
	addFixtureSeeds(f)
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x"}}]}}]}`+"\n\n"), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, _ uint8) {
		var a ChatAccumulator
		r := NewReader(bytes.NewReader(in), 1<<16)
		for {
			e, err := r.Next()
			if err != nil {
				break
			}
			var ds []Update
			ds, err = a.Add(e.Data)
			for _, d := range ds {
				if d.ToolCallStarted < -1 || (d.ToolCallStarted >= 0) != (d.ToolCallsStarted > 0) {
					t.Fatalf("ToolCallStarted %d with ToolCallsStarted %d", d.ToolCallStarted, d.ToolCallsStarted)
				}
			}
			if errors.Is(err, ErrUpstream) && a.ErrorRaw() == nil {
				t.Fatal("ErrUpstream without ErrorRaw")
			}
		}
		cs := a.Choices()
		if len(cs) > maxChoices {
			t.Fatalf("%d choices", len(cs))
		}
		for i := 1; i < len(cs); i++ {
			if cs[i-1].Index >= cs[i].Index {
				t.Fatalf("choices not sorted by unique index: %d then %d", cs[i-1].Index, cs[i].Index)
			}
		}
		// Every prefix of the input as one payload: Add must reject or
		// fold any of them without panicking.
		for i := 0; i <= len(in) && i < 512; i += 7 {
			_, _ = a.Add(in[:i])
		}
	})
}

// FuzzAccumulatorTape holds the walk that reads a chunk from the tape
// rawjson.ValidTape recorded to the walk that scans it: every chunk is
// also added to a second accumulator with 64 KiB of blanks after its
// opening brace, too long a document for a tape, and the two must report
// the same deltas, errors and accumulated answer.
func FuzzAccumulatorTape(f *testing.F) {
	addFixtureSeeds(f)
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"tool_calls":[`+strings.Repeat(`{"index":0,"function":{"arguments":"x"}},`, 9)+"{}]}}]}\n\n"), uint8(0)) // too many values for a tape
	f.Add([]byte(`data: {"choices":[{"index":1,"finish_reason":"stop","delta":{"content":"a}\"]","tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":{"x":[1,{}]}}}]}},{"index":0,"message":{"reasoning":"r"}}],"usage":{"prompt_tokens":3}}`+"\n\n"), uint8(0))
	pad := bytes.Repeat([]byte(" "), 1<<16)
	f.Fuzz(func(t *testing.T, in []byte, _ uint8) {
		var fast, slow ChatAccumulator
		var fastLog, slowLog []string
		logTo := func(log *[]string, ds []Update, err error) error {
			for _, d := range ds {
				*log = append(*log, fmt.Sprintf("%+v %q %q", d, d.Text, d.Reasoning))
			}
			return err
		}
		r := NewReader(bytes.NewReader(in), 1<<16)
		for {
			e, err := r.Next()
			if err != nil {
				break
			}
			data := bytes.TrimSpace(e.Data)
			if len(data) == 0 || data[0] != '{' {
				continue
			}
			padded := append(append(append([]byte{}, data[:1]...), pad...), data[1:]...)
			ds, err := fast.Add(data)
			errFast := logTo(&fastLog, ds, err)
			ds, err = slow.Add(padded)
			errSlow := logTo(&slowLog, ds, err)
			if errFast != errSlow {
				t.Fatalf("Add(%q) = %v; scanning %v", data, errFast, errSlow)
			}
		}
		if !slices.Equal(fastLog, slowLog) {
			t.Fatalf("deltas %q; scanning %q", fastLog, slowLog)
		}
		fu, fok := fast.Usage()
		su, sok := slow.Usage()
		if !reflect.DeepEqual(fast.Choices(), slow.Choices()) || fu != su || fok != sok ||
			fast.ID() != slow.ID() || fast.Model() != slow.Model() || fast.Created() != slow.Created() {
			t.Fatalf("answer %+v; scanning %+v", fast.Choices(), slow.Choices())
		}
	})
}
