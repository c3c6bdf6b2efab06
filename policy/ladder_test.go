package policy

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/rs/zerolog"
)

// req is one chat request of a session as the ladder sees it.
type req struct {
	steps  int // assistant turns in the history
	loop   bool
	last   int // Evidence.Last of the strongest detection
	count  int
	noProg bool
	key    string // pattern key; "" means "p1"
}

func (r req) verdict() inspect.Verdict {
	if !r.loop {
		return inspect.Verdict{}
	}
	key := r.key
	if key == "" {
		key = "p1"
	}
	return inspect.Verdict{
		Loop: true, Category: inspect.ToolRepetition, Confidence: 0.95, PatternKey: key,
		Detections: []inspect.Detection{{Category: inspect.ToolRepetition, Score: 0.95, Evidence: inspect.Evidence{
			Element: "bash(git status)", Tool: "bash", Args: `{"command":"git status"}`,
			Count: r.count, Threshold: 3, Last: r.last, NoProgress: r.noProg,
		}}},
	}
}

func (r req) trajectory() *inspect.Trajectory {
	return &inspect.Trajectory{Steps: make([]inspect.Step, r.steps), Messages: 2 + 2*r.steps}
}

// want is the part of a Decision a ladder test checks.
type want struct {
	action      Action
	level       int
	reapplied   bool
	collapse    bool
	urgency     Urgency
	constraints int
	failed      int
	recovered   int
}

func got(d Decision) want {
	return want{action: d.Action, level: d.Level, reapplied: d.Reapplied, collapse: d.Collapse,
		urgency: d.Urgency, constraints: len(d.Constraints), failed: len(d.Failed), recovered: len(d.Recovered)}
}

func loopReq(steps int, noProg bool) req {
	return req{steps: steps, loop: true, last: steps - 1, count: steps, noProg: noProg}
}

func TestLadder(t *testing.T) {
	type step struct {
		give req
		want want
	}
	warn0 := want{action: Warn, level: 0, urgency: Warning}
	tests := []struct {
		name   string
		ladder []Action
		steps  []step
	}{
		{
			name: "warn then constrain then terminate as the loop goes on",
			steps: []step{
				{loopReq(3, true), warn0},
				{loopReq(4, true), want{action: Constrain, level: 1, collapse: true, urgency: Critical, constraints: 1, failed: 0}},
				{loopReq(5, true), want{action: Terminate, level: 2, urgency: Critical, constraints: 1, failed: 0}},
				{loopReq(6, true), want{action: Terminate, level: 2, urgency: Critical, constraints: 1, failed: 0}},
			},
		},
		{
			name: "a retry of the same request re-applies the same level",
			steps: []step{
				{loopReq(3, true), warn0},
				{loopReq(3, true), want{action: Warn, level: 0, reapplied: true, urgency: Warning, failed: 0}},
				{loopReq(4, true), want{action: Constrain, level: 1, collapse: true, urgency: Critical, constraints: 1, failed: 0}},
				{loopReq(4, true), want{action: Constrain, level: 1, reapplied: true, collapse: true, urgency: Critical, constraints: 1, failed: 0}},
			},
		},
		{
			name: "old occurrences reported again after the agent moved on are left alone",
			steps: []step{
				{loopReq(3, true), warn0},
				{req{steps: 4, loop: true, last: 2, count: 3, noProg: true}, want{action: None, level: -1, failed: 1}},
			},
		},
		{
			name: "terminate is withheld without no-progress evidence",
			steps: []step{
				{loopReq(3, false), warn0},
				{loopReq(4, false), want{action: Constrain, level: 1, collapse: true, urgency: Critical, constraints: 1, failed: 0}},
				{loopReq(5, false), want{action: Constrain, level: 1, collapse: true, urgency: Critical, constraints: 1, failed: 0}},
				{loopReq(6, true), want{action: Terminate, level: 2, urgency: Critical, constraints: 1, failed: 0}},
			},
		},
		{
			name: "progress drops constraints; until then they are re-injected",
			steps: []step{
				{loopReq(3, true), warn0},
				{loopReq(4, true), want{action: Constrain, level: 1, collapse: true, urgency: Critical, constraints: 1, failed: 0}},
				{req{steps: 4}, want{action: None, level: -1, constraints: 1, failed: 1}},
				{req{steps: 5}, want{action: None, level: -1, failed: 1, recovered: 1}},
				{req{steps: 6}, want{action: None, level: -1, failed: 1}},
			},
		},
		{
			name: "a relapse after recovery escalates from where it was",
			steps: []step{
				{loopReq(3, true), warn0},
				{loopReq(4, true), want{action: Constrain, level: 1, collapse: true, urgency: Critical, constraints: 1, failed: 0}},
				{req{steps: 5}, want{action: None, level: -1, failed: 1, recovered: 1}},
				{loopReq(9, true), want{action: Terminate, level: 2, urgency: Critical, constraints: 1, failed: 0}},
			},
		},
		{
			name: "a second pattern starts its own ladder and keeps the first's constraints",
			steps: []step{
				{loopReq(3, true), warn0},
				{loopReq(4, true), want{action: Constrain, level: 1, collapse: true, urgency: Critical, constraints: 1, failed: 0}},
				{req{steps: 4, loop: true, last: 3, count: 3, key: "p2"}, want{action: Warn, level: 0, urgency: Warning, constraints: 1, failed: 1}},
			},
		},
		{
			name:   "terminate as first rung without evidence warns",
			ladder: []Action{Terminate},
			steps: []step{
				{loopReq(3, false), want{action: Warn, level: 0, urgency: Critical}},
				{loopReq(4, true), want{action: Terminate, level: 0, urgency: Critical, constraints: 1, failed: 0}},
			},
		},
		{
			name:   "reset rung collapses",
			ladder: []Action{Reset, Terminate},
			steps: []step{
				{loopReq(3, true), want{action: Reset, level: 0, collapse: true, urgency: Critical, constraints: 1}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.ladder != nil {
				cfg.Ladder = tt.ladder
			}
			p := New(cfg, nil, zerolog.Nop())
			for i, s := range tt.steps {
				d, err := p.Decide(context.Background(), "s", s.give.verdict(), s.give.trajectory(), ModeEnforce)
				if err != nil {
					t.Fatalf("request %d: Decide error %v", i, err)
				}
				if g := got(d); g != s.want {
					t.Fatalf("request %d: Decide = %+v; want %+v", i, g, s.want)
				}
				if d.Would != d.Action {
					t.Fatalf("request %d: Would = %s; want %s in enforce mode", i, d.Would, d.Action)
				}
			}
		})
	}
}

func TestDecideRecordsInterventions(t *testing.T) {
	p := New(DefaultConfig(), nil, zerolog.Nop())
	ctx := context.Background()
	for _, r := range []req{loopReq(3, true), loopReq(3, true), loopReq(4, true)} {
		if _, err := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce); err != nil {
			t.Fatal(err)
		}
	}
	st, err := p.Store().Load(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	var acts []Action
	for _, iv := range st.Interventions {
		acts = append(acts, iv.Action)
	}
	if want := []Action{Warn, Constrain}; !slices.Equal(acts, want) {
		t.Fatalf("interventions = %v; want %v (a retry records nothing)", acts, want)
	}
	pt := st.Patterns["p1"]
	if pt == nil || pt.Level != 1 || pt.Step != 3 || !pt.Active || pt.Brief != "bash(git status) x4" || pt.Tool != "bash" {
		t.Fatalf("pattern = %+v; want level 1, step 3, active, brief from evidence", pt)
	}
	if st.Resets != 1 {
		t.Fatalf("resets = %d; want 1 (constrain collapses by default)", st.Resets)
	}
	r := req{steps: 5, loop: true, last: 4, count: 3, key: "p2"}
	d, _ := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
	if want := []string{"bash(git status) x4"}; !slices.Equal(d.Failed, want) {
		t.Fatalf("Failed = %q; want %q (the latest brief of the other pattern)", d.Failed, want)
	}
}

func TestShadowChangesNothing(t *testing.T) {
	p := New(DefaultConfig(), nil, zerolog.Nop())
	ctx := context.Background()
	for i, r := range []req{loopReq(3, true), loopReq(4, true), loopReq(5, true)} {
		d, err := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeShadow)
		if err != nil {
			t.Fatal(err)
		}
		if d.Action != Shadow || d.Would != Warn || d.Level != 0 || d.Mode != ModeShadow {
			t.Fatalf("request %d: Decide = action %s would %s level %d mode %s; want shadow/warn/0/shadow", i, d.Action, d.Would, d.Level, d.Mode)
		}
	}
	if n := p.Store().(*MemoryStore).Len(); n != 0 {
		t.Fatalf("store holds %d sessions after shadow decisions; want 0", n)
	}
}

func TestOffDoesNothing(t *testing.T) {
	st := &countingStore{Store: NewMemoryStore(0, 0)}
	p := New(DefaultConfig(), st, zerolog.Nop())
	r := loopReq(3, true)
	d, err := p.Decide(context.Background(), "s", r.verdict(), r.trajectory(), ModeOff)
	if err != nil || d.Action != None || d.Would != None {
		t.Fatalf("Decide(off) = %s/%s, %v; want none/none, nil", d.Action, d.Would, err)
	}
	if st.calls != 0 {
		t.Fatalf("off mode made %d store calls; want 0", st.calls)
	}
}

func TestAdminModeOverride(t *testing.T) {
	p := New(DefaultConfig(), nil, zerolog.Nop())
	ctx := context.Background()
	if err := p.SetMode(ctx, "s", ModeShadow); err != nil {
		t.Fatal(err)
	}
	r := loopReq(3, true)
	d, _ := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
	if d.Action != Shadow || d.Would != Warn {
		t.Fatalf("Decide with session override shadow = %s/%s; want shadow/warn", d.Action, d.Would)
	}
	st, _ := p.Store().Load(ctx, "s")
	if len(st.Patterns) != 0 {
		t.Fatalf("overridden session recorded %d patterns; want 0", len(st.Patterns))
	}
	if err := p.SetMode(ctx, "s", "loud"); err == nil {
		t.Fatal("SetMode(loud) succeeded; want an error")
	}
	if err := p.SetMode(ctx, "s", ModeOff); err != nil {
		t.Fatal(err)
	}
	if d, _ := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce); d.Action != None {
		t.Fatalf("Decide with session override off = %s; want none", d.Action)
	}
}

func TestRecordCut(t *testing.T) {
	p := New(DefaultConfig(), nil, zerolog.Nop())
	ctx := context.Background()
	c := Cut{Category: inspect.TokenDegeneration, Offset: 1234, TokensSaved: 900}
	if err := p.RecordCut(ctx, "s", c); err != nil {
		t.Fatal(err)
	}
	d, _ := p.Decide(ctx, "s", inspect.Verdict{}, req{steps: 3}.trajectory(), ModeEnforce)
	if d.Action != None || d.Cut == nil || d.Cut.Offset != 1234 || d.Cut.At.IsZero() {
		t.Fatalf("Decide after a cut = %s, cut %+v; want none carrying the cut", d.Action, d.Cut)
	}
	d, _ = p.Decide(ctx, "s", inspect.Verdict{}, req{steps: 4}.trajectory(), ModeEnforce)
	if d.Action != None || d.Cut != nil {
		t.Fatalf("second Decide after a cut = %s, cut %+v; want none, the cut consumed", d.Action, d.Cut)
	}
}

func TestStoreFailureFailsOpen(t *testing.T) {
	var logs bytes.Buffer
	p := New(DefaultConfig(), failingStore{}, zerolog.New(&logs))
	ctx := context.Background()
	for i, r := range []req{loopReq(3, true), loopReq(4, true)} {
		d, err := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
		if err != nil || !d.StoreFailed {
			t.Fatalf("request %d: Decide err %v, StoreFailed %v; want nil, true (fail open, flagged)", i, err, d.StoreFailed)
		}
		if d.Action != Warn || d.Level != 0 {
			t.Fatalf("request %d: Decide = %s level %d; want warn 0 (fresh session)", i, d.Action, d.Level)
		}
	}
	if bytes.Contains(logs.Bytes(), []byte("git status")) {
		t.Fatalf("log carries argument content: %s", logs.Bytes())
	}
	if !bytes.Contains(logs.Bytes(), []byte("session store failed")) {
		t.Fatalf("store failure not logged: %s", logs.Bytes())
	}
}

func TestRequestMode(t *testing.T) {
	tests := []struct {
		name   string
		mode   Mode
		allow  bool
		header string
		want   Mode
	}{
		{name: "no header", mode: ModeEnforce, allow: true, want: ModeEnforce},
		{name: "override not allowed", mode: ModeEnforce, header: "off", want: ModeEnforce},
		{name: "shadow allowed", mode: ModeEnforce, allow: true, header: "Shadow", want: ModeShadow},
		{name: "off allowed", mode: ModeShadow, allow: true, header: " off ", want: ModeOff},
		{name: "cannot raise", mode: ModeShadow, allow: true, header: "enforce", want: ModeShadow},
		{name: "unknown ignored", mode: ModeEnforce, allow: true, header: "loud", want: ModeEnforce},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Mode, cfg.AllowClientOverride = tt.mode, tt.allow
			if got := New(cfg, nil, zerolog.Nop()).RequestMode(tt.header); got != tt.want {
				t.Fatalf("RequestMode(%q) = %s; want %s", tt.header, got, tt.want)
			}
		})
	}
}

func TestStateBounded(t *testing.T) {
	p := New(DefaultConfig(), nil, zerolog.Nop())
	ctx := context.Background()
	for i := range 100 {
		r := req{steps: i + 3, loop: true, last: i + 2, count: 3, noProg: true, key: "k" + string(rune('A'+i%60))}
		if _, err := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		_ = p.RecordCut(ctx, "s", Cut{Category: inspect.TokenDegeneration})
	}
	st, _ := p.Store().Load(ctx, "s")
	if len(st.Patterns) > MaxPatterns || len(st.Interventions) > MaxInterventions || len(st.Cuts) > MaxCuts {
		t.Fatalf("state holds %d patterns, %d interventions, %d cuts; want at most %d, %d, %d",
			len(st.Patterns), len(st.Interventions), len(st.Cuts), MaxPatterns, MaxInterventions, MaxCuts)
	}
}

type failingStore struct{}

var errDown = errors.New("store down")

func (failingStore) Load(context.Context, string) (State, error) { return State{}, errDown }
func (failingStore) Update(context.Context, string, func(*State) error) (State, error) {
	return State{}, errDown
}

type countingStore struct {
	Store
	calls int
}

func (c *countingStore) Load(ctx context.Context, k string) (State, error) {
	c.calls++
	return c.Store.Load(ctx, k)
}

func (c *countingStore) Update(ctx context.Context, k string, fn func(*State) error) (State, error) {
	c.calls++
	return c.Store.Update(ctx, k, fn)
}

func TestNoLoopWritesNothing(t *testing.T) {
	p := New(DefaultConfig(), nil, zerolog.Nop())
	for i := range 5 {
		r := req{steps: 3 + i}
		if d, err := p.Decide(context.Background(), "calm", r.verdict(), r.trajectory(), ModeEnforce); err != nil || d.Action != None {
			t.Fatalf("Decide(no loop) = %s, %v; want none, nil", d.Action, err)
		}
	}
	if n := p.Store().(*MemoryStore).Len(); n != 0 {
		t.Fatalf("store holds %d sessions after loop-free requests; want 0", n)
	}
}

func TestDecideSurvivesForeignState(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(0, 0)
	for _, level := range []int{-5, 99} {
		_, _ = s.Update(ctx, "s", func(st *State) error {
			st.Patterns = map[string]*Pattern{"p1": {Level: level, Step: 1, Seen: 1, Active: true}}
			return nil
		})
		p := New(DefaultConfig(), s, zerolog.Nop())
		for _, r := range []req{{steps: 1}, loopReq(3, true), loopReq(2, false)} {
			d, err := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
			if err != nil || d.Level >= len(DefaultLadder()) {
				t.Fatalf("level %d: Decide = level %d, %v; want a level inside the ladder", level, d.Level, err)
			}
		}
	}
}

func TestDecideCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := New(DefaultConfig(), nil, zerolog.Nop())
	r := loopReq(3, true)
	if d, err := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce); !errors.Is(err, context.Canceled) || d.Action != None {
		t.Fatalf("Decide with a done context = %s, %v; want none, context.Canceled", d.Action, err)
	}
}
