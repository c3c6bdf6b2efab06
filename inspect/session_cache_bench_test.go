package inspect

import (
	"slices"
	"testing"
)

// benchSession measures one turn of a session whose previous turn is in
// the cache (warm) or whose cached history is another one (miss): parse,
// inspect and release (as the proxy does) of the request that adds one
// call and its result to a history of turns calls. Before each turn the
// previous turn's state is put back, as the request before left it: the
// turn extends its steps in place, so this writes back the steps a turn
// may write (see restore and finish), about 256 of them, and is timed.
func benchSession(b *testing.B, turns int, warm bool) {
	e, _ := NewEngine(DefaultConfig())
	h, _ := splitHistory(b, ChatCompletions, benchBody(turns+1))
	prevBody := h.body(h.msgs[:len(h.msgs)-2])
	if !warm {
		prevBody = benchBody20KB()
	}
	body := h.body(h.msgs)
	c := NewSessionCache(1 << 30)
	tr, err := e.ParseSession(c, "s", ChatCompletions, prevBody)
	if err != nil {
		b.Fatal(err)
	}
	tr.Release()
	prev := c.get("s")
	keep := max(0, min(prev.from, len(prev.steps)-lookBack))
	saved := slices.Clone(prev.steps[keep:])
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		copy(prev.steps[keep:], saved)
		en := *prev
		c.put(&en)
		tr, err := e.ParseSession(c, "s", ChatCompletions, body)
		if err != nil {
			b.Fatal(err)
		}
		if v := e.Inspect(tr); v.Loop {
			b.Fatal("healthy history reported as a loop")
		}
		tr.Release()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	st := c.Stats()
	if warm != (st.Hits > 0) || warm == (st.Misses > 1) {
		b.Fatalf("stats %+v: the benchmark did not take the path it names", st)
	}
	b.ReportMetric(float64(st.Bytes), "cache-bytes")
}

func BenchmarkSessionTurn20(b *testing.B)   { benchSession(b, 20, true) }
func BenchmarkSessionTurn200(b *testing.B)  { benchSession(b, 200, true) }
func BenchmarkSessionTurn1000(b *testing.B) { benchSession(b, 1000, true) }
func BenchmarkSessionMiss200(b *testing.B)  { benchSession(b, 200, false) }
func BenchmarkSessionMiss1000(b *testing.B) { benchSession(b, 1000, false) }
