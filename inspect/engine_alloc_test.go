//go:build !race

package inspect

import "testing"

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
