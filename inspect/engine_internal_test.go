package inspect

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestInspectReportsDetectorPanic: a detector bug fails open (no loop) and
// says so, so the proxy can count and log it instead of losing it.
func TestInspectReportsDetectorPanic(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := e.Parse([]byte(`{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"secret-arg\"}"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	saved := detectors
	t.Cleanup(func() { detectors = saved })
	tests := []struct {
		name  string
		panic func(*inspection)
	}{
		{"runtime error", func(in *inspection) { _ = in.t.Steps[len(in.t.Steps)+1] }},
		{"value quoting content", func(in *inspection) { panic("bad call " + in.t.Steps[0].Calls[0].Args) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			detectors = append(saved[:len(saved):len(saved)], detector{ToolRepetition, func(in *inspection) (Detection, bool) {
				tt.panic(in)
				return Detection{}, false
			}})
			v := e.Inspect(tr)
			if !errors.Is(v.Err, ErrDetector) || v.Loop {
				t.Fatalf("Inspect with a panicking detector = %+v; want no loop and Err wrapping ErrDetector", v)
			}
			if msg := v.Err.Error(); len(msg) == 0 || strings.Contains(msg, "secret-arg") {
				t.Errorf("Err = %q; want a description without the call's arguments", msg)
			}
		})
	}
	detectors = saved
	if v := e.Inspect(tr); v.Err != nil {
		t.Errorf("Inspect with the real detectors: Err = %v; want nil", v.Err)
	}
}

// TestCollectLatestEvents checks that collect, which walks back only as far
// as the latest maxEvents calls, keeps exactly the calls (and the window's
// start among them) that collecting every call from Trajectory.Start and
// dropping all but the latest maxEvents keeps.
func TestCollectLatestEvents(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 300; trial++ {
		tr := &Trajectory{meta: defaultMetadataArgs}
		for s := rng.IntN(400); s > 0; s-- {
			st := Step{}
			for k := rng.IntN(4); k > 0; k-- {
				name := "bash"
				if rng.IntN(5) == 0 {
					name = "todo_write" // ignored by default
				}
				st.Calls = append(st.Calls, Call{Name: name, Args: "{}"})
			}
			tr.Steps = append(tr.Steps, st)
		}
		tr.Start = rng.IntN(len(tr.Steps) + 1)
		lim := e.cfg.resolve("")
		lim.Window = 2 + rng.IntN(300)
		in := &inspection{e: e, t: tr, lim: &lim, w: &work{}}
		in.collect()

		// The reference: every counted call from Start, then the cut.
		type ref struct{ step, call int }
		var all []ref
		start := min(tr.Start, len(tr.Steps))
		winStart := max(start, len(tr.Steps)-lim.Window)
		win := -1
		for s := start; s < len(tr.Steps); s++ {
			if s == winStart {
				win = len(all)
			}
			for k, c := range tr.Steps[s].Calls {
				if !e.cfg.ignored(c.Name) {
					all = append(all, ref{s, k})
				}
			}
		}
		if win < 0 {
			win = len(all)
		}
		if drop := len(all) - maxEvents; drop > 0 {
			all, win = all[drop:], max(0, win-drop)
		}
		got := make([]ref, len(in.evs))
		for i, x := range in.evs {
			got[i] = ref{x.step, x.call}
		}
		if !slices.Equal(got, all) || in.win != win {
			t.Fatalf("trial %d (%d steps, start %d, window %d): %d events from %v, win %d; want %d from %v, win %d",
				trial, len(tr.Steps), tr.Start, lim.Window, len(got), got[:min(1, len(got))], in.win, len(all), all[:min(1, len(all))], win)
		}
	}
}
