package sse

import (
	"bytes"
	"os"
	"testing"
)

// datas returns the data of every event of a fixture.
func fixtureData(tb testing.TB, file string) [][]byte {
	tb.Helper()
	in, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	r := NewReader(bytes.NewReader(in), 0)
	for {
		e, err := r.Next()
		if err != nil {
			return out
		}
		if e.Data != nil {
			out = append(out, bytes.Clone(e.Data))
		}
	}
}

func benchUpdates(b *testing.B, file string, a streamAcc, reset func()) {
	ds := fixtureData(b, file)
	n := 0
	for _, d := range ds {
		n += len(d)
	}
	sink := 0
	fn := func(u Update, _ error) { sink += len(u.Text) + u.ToolCallDone }
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		reset()
		for _, d := range ds {
			fn(a.Add(d))
		}
	}
	_ = sink
}

func BenchmarkResponsesAccumulator(b *testing.B) {
	var a ResponsesAccumulator
	benchUpdates(b, "testdata/responses/reasoning-text-two-calls.sse", &a, a.Reset)
}

func BenchmarkAnthropicAccumulator(b *testing.B) {
	var a AnthropicAccumulator
	benchUpdates(b, "testdata/anthropic/thinking-two-tools.sse", &a, a.Reset)
}
