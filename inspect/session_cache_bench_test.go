package inspect

import "testing"

// benchSession measures one turn of a session whose previous turn is in
// the cache (warm) or whose cached history is another one (miss): parse
// and inspect of the request that adds one call and its result to a
// history of turns calls.
func benchSession(b *testing.B, turns int, warm bool) {
	e, _ := NewEngine(DefaultConfig())
	h, _ := splitHistory(b, ChatCompletions, benchBody(turns+1))
	prevBody := h.body(h.msgs[:len(h.msgs)-2])
	if !warm {
		prevBody = benchBody20KB()
	}
	body := h.body(h.msgs)
	c := NewSessionCache(1 << 30)
	if _, err := e.ParseSession(c, "s", ChatCompletions, prevBody); err != nil {
		b.Fatal(err)
	}
	prev := c.get("s")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		c.put(prev) // the previous turn's state, as the last request left it
		tr, err := e.ParseSession(c, "s", ChatCompletions, body)
		if err != nil {
			b.Fatal(err)
		}
		if v := e.Inspect(tr); v.Loop {
			b.Fatal("healthy history reported as a loop")
		}
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
