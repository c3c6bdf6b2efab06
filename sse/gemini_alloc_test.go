//go:build !race

package sse

import "testing"

func TestGeminiAccumulatorAllocs(t *testing.T) {
	chunks := geminiChunks(t, "code-assist.sse")
	var a GeminiAccumulator
	add := func() {
		a.Reset()
		for _, c := range chunks {
			_, _ = a.Add(c)
		}
	}
	add()
	if n := testing.AllocsPerRun(50, add); n != 0 {
		t.Errorf("a stream allocates %v times once warm; want 0", n)
	}
}
