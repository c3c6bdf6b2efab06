package policy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// FuzzDecideState feeds arbitrary stored state (as redis may hold it,
// written by another version) through the ladder: Decide must not panic and
// must stay inside the ladder.
func FuzzDecideState(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "state"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", "state", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, 3, true)
	}
	p := New(DefaultConfig(), nil, zerolog.Nop())
	f.Fuzz(func(t *testing.T, raw []byte, steps int, loop bool) {
		st, err := decodeState(raw)
		if err != nil {
			return
		}
		steps = max(0, min(steps, 1000))
		r := req{steps: steps}
		if loop {
			r = loopReq(steps, true)
		}
		d, _ := p.decide(&st, r.verdict(), r.trajectory(), p.now())
		if d.Level >= len(p.cfg.Ladder) {
			t.Fatalf("Level %d outside the ladder", d.Level)
		}
	})
}

func TestStateFixturesDecode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "state", "active.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	p := New(DefaultConfig(), nil, zerolog.Nop())
	d, _ := p.decide(&st, req{steps: 4}.verdict(), req{steps: 4}.trajectory(), p.now())
	if d.Action != None || d.Reapplied || d.Cut == nil || len(d.Constraints) != 1 || d.Constraints[0].Tool != "bash" {
		t.Fatalf("decide(active.json, no new step) = %s reapplied %v cut %v constraints %+v; want none carrying the constraint and the cut",
			d.Action, d.Reapplied, d.Cut, d.Constraints)
	}
}
