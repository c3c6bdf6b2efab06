//go:build !race

package sse

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The race detector allocates on its own; budgets are checked without it.

func TestReaderAllocs(t *testing.T) {
	one := "event: x\nid: 1\nretry: 10\n: c\ndata: {\"a\":1}\ndata: {\"b\":2}\n\n"
	stream := strings.Repeat(one, 10)
	var rd strings.Reader
	r := NewReader(&rd, 0)
	run := func() {
		rd.Reset(stream)
		r.Reset(&rd)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
	run() // size the buffers
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Errorf("Reader: %v allocations per 10-event stream; want 0", n)
	}
}

func TestAccumulatorAllocs(t *testing.T) {
	in, err := os.ReadFile("testdata/openai-chat-parallel-tools.sse")
	if err != nil {
		t.Fatal(err)
	}
	var datas [][]byte
	r := NewReader(bytes.NewReader(in), 0)
	for {
		e, err := r.Next()
		if err != nil {
			break
		}
		datas = append(datas, bytes.Clone(e.Data))
	}
	content := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a \"quoted\"\nline \u00e9"},"logprobs":null,"finish_reason":null}]}`)
	var a ChatAccumulator
	sink := 0
	fn := func(ds []Update, _ error) {
		for _, d := range ds {
			sink += len(d.Text)
		}
	}
	whole := func() {
		a.Reset()
		for _, d := range datas {
			fn(a.Add(d))
		}
		for range 20 {
			fn(a.Add(content))
		}
	}
	whole() // size the buffers
	if n := testing.AllocsPerRun(100, whole); n != 0 {
		t.Errorf("Accumulator: %v allocations per pooled stream; want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { fn(a.Add(content)) }); n != 0 {
		t.Errorf("Accumulator: %v allocations per content chunk; want 0", n)
	}
}
