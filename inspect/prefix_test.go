package inspect

import "testing"

// TestHealthyPrefixes replays every healthy case one step at a time, as
// the proxy sees it request after request: no prefix may be called a loop.
func TestHealthyPrefixes(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range loadCorpus(t) {
		if c.Expect != "no_loop" {
			continue
		}
		tr, err := Parse(c.Request)
		if err != nil {
			t.Fatalf("%s: Parse: %v", c.ID, err)
		}
		for n := 1; n <= len(tr.Steps); n++ {
			sub := *tr
			sub.Steps = tr.Steps[:n]
			if v := e.Inspect(&sub); v.Loop {
				t.Errorf("%s: prefix of %d steps: Inspect = %s; want no loop", c.ID, n, v.Summary())
				break
			}
		}
	}
}
