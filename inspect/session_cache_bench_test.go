package inspect

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

// benchSession measures one turn of a session whose previous turn is in
// the cache (warm) or whose cached history is another one (miss): parse,
// inspect and release (as the proxy does) of the request that adds one
// call and its result to a history of turns calls. Before each turn the
// previous turn's state is put back, as the request before left it: the
// turn extends its steps in place, so this writes back the steps a turn
// may write (see restore and finish: the last lookBack, and those whose
// results leave the reach), which is timed.
func benchSession(b *testing.B, turns int, warm bool) {
	e, _ := NewEngine(DefaultConfig())
	h, _ := splitHistory(b, wireapi.Chat, benchBody(turns+1))
	prevBody := h.body(h.msgs[:len(h.msgs)-2])
	if !warm {
		prevBody = benchBody20KB()
	}
	body := h.body(h.msgs)
	c := NewSessionCache(1 << 30)
	tr, err := e.ParseSession(c, "s", wireapi.Chat, prevBody)
	if err != nil {
		b.Fatal(err)
	}
	tr.Release()
	prev := c.get("s")
	n := len(prev.steps)
	pristine := slices.Clone(prev.steps)
	// The reach moves on by the steps of the turn's one call.
	left := slices.Clone(prev.steps[prev.from:min(n, prev.from+stepsRoom)])
	last := slices.Clone(prev.steps[max(0, n-lookBack):])
	reset := func() {
		copy(prev.steps[prev.from:], left)
		copy(prev.steps[max(0, n-lookBack):], last)
		en := *prev
		c.put(&en)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		reset()
		tr, err := e.ParseSession(c, "s", wireapi.Chat, body)
		if err != nil {
			b.Fatal(err)
		}
		if v := e.Inspect(tr); v.Loop {
			b.Fatal("healthy history reported as a loop")
		}
		tr.Release()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	b.StopTimer()
	st := c.Stats()
	if reset(); !reflect.DeepEqual(prev.steps[:n], pristine) {
		b.Fatal("the turns wrote steps the benchmark does not put back")
	}
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

// BenchmarkSessionTurnsInterleaved measures turns as the proxy serves an
// agent fleet: 16 sessions each growing turn by turn to 200 calls, their
// turns taken in turn, so that what a session's previous turn left in the
// cache has mostly left the CPU's caches (15 other bodies of up to 420 KB
// were read since). Each body is first copied into one buffer, as the
// proxy reads it from the socket (timed: a few µs). A session starts
// again, under a new id, after its last turn; the sessions start
// staggered, so that a turn's history is 100 calls on average, and a few
// turns in a hundred are a session's first.
func BenchmarkSessionTurnsInterleaved(b *testing.B) {
	const sessions, turns = 16, 200
	e, _ := NewEngine(DefaultConfig())
	h, _ := splitHistory(b, wireapi.Chat, benchBody(turns))
	bodies := make([][]byte, turns)
	for k := range bodies {
		bodies[k] = h.body(h.msgs[:2+2*(k+1)])
	}
	c := NewSessionCache(1 << 30)
	var buf []byte
	at := make([]int, sessions)
	ids := make([]string, sessions)
	for s := range sessions {
		at[s], ids[s] = s*turns/sessions, fmt.Sprintf("s%d", s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		s := i % sessions
		buf = append(buf[:0], bodies[at[s]]...)
		tr, err := e.ParseSession(c, ids[s], wireapi.Chat, buf)
		if err != nil {
			b.Fatal(err)
		}
		if v := e.Inspect(tr); v.Loop {
			b.Fatal("healthy history reported as a loop")
		}
		tr.Release()
		if at[s]++; at[s] == turns {
			at[s], ids[s] = 0, fmt.Sprintf("s%d-%d", s, i)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	b.StopTimer()
	if st := c.Stats(); b.N >= 1000 && st.Hits < 9*st.Misses {
		b.Fatalf("stats %+v: most turns should extend the session's last", st)
	}
}
