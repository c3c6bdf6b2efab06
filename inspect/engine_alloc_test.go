//go:build !race

package inspect

import (
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

// TestParseInspectAllocs holds Parse + Inspect to the allocation budget of
// the issue that made them fast: under 200 allocations for a 200-turn
// (about 400 KB) healthy history, and no per-turn growth beyond that
// order for 1,000 turns.
func TestParseInspectAllocs(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		turns int
		max   float64
	}{
		{200, 200},
		{1000, 200},
	}
	for _, tt := range tests {
		body := benchBody(tt.turns)
		got := testing.AllocsPerRun(5, func() {
			tr, err := Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			e.Inspect(tr)
		})
		if got > tt.max {
			t.Errorf("Parse+Inspect(%d turns) = %.0f allocs; want <= %.0f", tt.turns, got, tt.max)
		}
	}
}

// TestSessionTurnAllocs holds a warm session turn (ParseSession of the
// history grown by one call and its result, Inspect, Release) to its
// allocations: the turn's own strings, calls, digest and cache entry, not
// a trajectory's worth of steps or the inspection's state.
func TestSessionTurnAllocs(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(120))
	var bodies [][]byte
	for turn := 100; turn <= 112; turn++ {
		bodies = append(bodies, h.body(h.msgs[:2+2*turn]))
	}
	c := NewSessionCache(64 << 20)
	next := func() {
		tr, err := e.ParseSession(c, "s", wireapi.Chat, bodies[0])
		if err != nil {
			t.Fatal(err)
		}
		e.Inspect(tr)
		tr.Release()
		bodies = bodies[1:]
	}
	next()
	if got := testing.AllocsPerRun(10, next); got > 14 {
		t.Errorf("a session turn = %.0f allocations; want <= 14", got)
	}
	if st := c.Stats(); st.Hits != 11 {
		t.Fatalf("stats %+v: the turns did not resume from the cache", st)
	}
}
