package policy

import (
	"context"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/redistest"
	"github.com/rs/zerolog"
)

// budgetStep is one request of a budgeted session: the tokens its answer
// reports, and what the request is to get.
type budgetStep struct {
	tokens   int64
	action   Action
	kind     string // the budget that decided, "" when none did
	exceeded bool
}

func runBudget(t *testing.T, p *Policy, key, model string, steps []budgetStep) {
	t.Helper()
	ctx := context.Background()
	for i, s := range steps {
		traj := &inspect.Trajectory{Model: model, Steps: make([]inspect.Step, i+1), Messages: 2 + 2*i}
		d, err := p.Decide(ctx, key, inspect.Verdict{}, traj, ModeEnforce)
		if err != nil {
			t.Fatal(err)
		}
		kind, exceeded := "", false
		if d.Budget != nil {
			kind, exceeded = d.Budget.Kind, d.Budget.Exceeded
		}
		if d.Action != s.action || kind != s.kind || exceeded != s.exceeded {
			t.Fatalf("request %d: action %s, budget %q exceeded %v; want %s, %q, %v (%+v)", i+1, d.Action, kind, exceeded,
				s.action, s.kind, s.exceeded, d.Budget)
		}
		if s.exceeded && d.Verdict.Category != BudgetCategory {
			t.Errorf("request %d: category %q; want %q", i+1, d.Verdict.Category, BudgetCategory)
		}
		// The proxy records the usage of answers to budgeted requests.
		if d.Action != Terminate && s.tokens > 0 && d.Budgeted {
			if err := p.RecordUsage(ctx, key, s.tokens); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestBudgets(t *testing.T) {
	ok := budgetStep{action: None}
	warnTok := budgetStep{tokens: 20, action: Warn, kind: BudgetTokens}
	endTok := budgetStep{action: Terminate, kind: BudgetTokens, exceeded: true}
	tests := []struct {
		name  string
		cfg   Config
		model string
		steps []budgetStep
	}{
		{"off by default", Config{}, "m", []budgetStep{{tokens: 1e9, action: None}, {tokens: 1e9, action: None}}},
		{
			"tokens: warned once past 80%, ended once spent",
			Config{SessionMaxTokens: 1000}, "m",
			[]budgetStep{{tokens: 500, action: None}, {tokens: 300, action: None}, {tokens: 100, action: Warn, kind: BudgetTokens},
				{tokens: 150, action: None}, endTok, endTok},
		},
		{
			"turns: the 5th call is warned, the 6th ended",
			Config{SessionMaxTurns: 5}, "m",
			[]budgetStep{ok, ok, ok, ok, {action: Warn, kind: BudgetTurns}, {action: Terminate, kind: BudgetTurns, exceeded: true}},
		},
		{
			"model override raises the bound",
			Config{SessionMaxTokens: 100, Models: map[string]Budget{"big-*": {MaxTokens: 1000}, "big-model-*": {MaxTokens: 10000}}},
			"big-model-1", []budgetStep{{tokens: 5000, action: None}, {tokens: 3500, action: None},
				{tokens: 2000, action: Warn, kind: BudgetTokens}, endTok},
		},
		{
			"model override turns the bound off",
			Config{SessionMaxTokens: 100, Models: map[string]Budget{"free": {MaxTokens: -1}}},
			"free", []budgetStep{{tokens: 5000, action: None}, {tokens: 5000, action: None}},
		},
		{
			"model override for another model leaves the default",
			Config{SessionMaxTokens: 100, Models: map[string]Budget{"free": {MaxTokens: -1}}},
			"paid", []budgetStep{{tokens: 90, action: None}, warnTok, endTok},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			p := New(tt.cfg, nil, zerolog.Nop())
			runBudget(t, p, "s", tt.model, tt.steps)
		})
	}
}

// A spent session is ended; a fresh one beside it is untouched, and a
// session's own override wins over the configuration.
func TestBudgetPerSession(t *testing.T) {
	p := New(Config{SessionMaxTokens: 100}, nil, zerolog.Nop())
	ctx := context.Background()
	end := budgetStep{action: Terminate, kind: BudgetTokens, exceeded: true}
	runBudget(t, p, "spent", "m", []budgetStep{{tokens: 200, action: None}, end})
	runBudget(t, p, "fresh", "m", []budgetStep{{tokens: 10, action: None}, {tokens: 10, action: None}})
	runBudget(t, p, "spent", "m", []budgetStep{end})

	if err := p.SetBudget(ctx, "generous", &Budget{MaxTokens: 1000, MaxTurns: 4}); err != nil {
		t.Fatal(err)
	}
	runBudget(t, p, "generous", "m", []budgetStep{{tokens: 300, action: None}, {tokens: 300, action: None},
		{tokens: 300, action: None}, {tokens: 50, action: Warn, kind: BudgetTokens}, {action: Terminate, kind: BudgetTurns, exceeded: true}})

	// An override alone, with no configured budget, applies too.
	q := New(Config{}, nil, zerolog.Nop())
	if err := q.SetBudget(ctx, "one", &Budget{MaxTurns: 1}); err != nil {
		t.Fatal(err)
	}
	runBudget(t, q, "one", "m", []budgetStep{{action: None, tokens: 5}, {action: Terminate, kind: BudgetTurns, exceeded: true}})
	runBudget(t, q, "other", "m", []budgetStep{{action: None}, {action: None}})
	st, _ := q.Store().Load(ctx, "other")
	if !st.Updated.IsZero() {
		t.Errorf("a session without a budget was written: %+v", st)
	}

	// A reset forgets loops, not the budget used.
	if err := p.ResetSession(ctx, "spent"); err != nil {
		t.Fatal(err)
	}
	runBudget(t, p, "spent", "m", []budgetStep{end})
}

// A loop's own decision stands beside the budget warning, and a spent
// budget ends the session whatever the loop's rung.
func TestBudgetWithLoop(t *testing.T) {
	p := New(Config{SessionMaxTokens: 100}, nil, zerolog.Nop())
	ctx := context.Background()
	r := loopReq(3, true)
	d, _ := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
	if d.Action != Warn || d.Budget != nil {
		t.Fatalf("first: %s %+v; want the loop's warn", d.Action, d.Budget)
	}
	_ = p.RecordUsage(ctx, "s", 85)
	r = loopReq(4, true)
	d, _ = p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
	if d.Action != Constrain || d.Budget == nil || d.Budget.Exceeded {
		t.Fatalf("second: %s %+v; want the loop's constrain with the budget warning", d.Action, d.Budget)
	}
	_ = p.RecordUsage(ctx, "s", 20)
	r = loopReq(5, true)
	d, _ = p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
	if d.Action != Terminate || d.Budget == nil || !d.Budget.Exceeded || d.Verdict.Category != inspect.ToolRepetition {
		t.Fatalf("third: %s %+v %s; want terminate on the budget, the loop's verdict kept", d.Action, d.Budget, d.Verdict.Category)
	}
	// Shadow mode changes nothing: neither counts nor ends.
	s := New(Config{SessionMaxTurns: 1}, nil, zerolog.Nop())
	for range 3 {
		d, _ := s.Decide(ctx, "sh", inspect.Verdict{}, r.trajectory(), ModeShadow)
		if d.Budget != nil || d.Would != None {
			t.Fatalf("shadow: %+v", d)
		}
	}
}

func TestBudgetValidate(t *testing.T) {
	for _, c := range []Config{
		{SessionMaxTokens: -1}, {SessionMaxTurns: -2}, {Models: map[string]Budget{"[": {MaxTokens: 5}}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil; want an error", c)
		}
	}
}

// Two replicas share one redis: the tokens one replica records end the
// session on the other, and neither touches a fresh session.
func TestBudgetSharedThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{SessionMaxTokens: 1000, SessionMaxTurns: 100}
	a := New(cfg, newRedisStore(t, srv.URL(0), time.Second), zerolog.Nop())
	b := New(cfg, newRedisStore(t, srv.URL(0), time.Second), zerolog.Nop())
	runBudget(t, a, "s", "m", []budgetStep{{tokens: 700, action: None}})
	runBudget(t, b, "s", "m", []budgetStep{{tokens: 400, action: None}})
	runBudget(t, a, "s", "m", []budgetStep{{action: Terminate, kind: BudgetTokens, exceeded: true}})
	runBudget(t, b, "s", "m", []budgetStep{{action: Terminate, kind: BudgetTokens, exceeded: true}})
	runBudget(t, b, "fresh", "m", []budgetStep{{tokens: 10, action: None}})

	// A session override set through one replica holds on the other.
	if err := a.SetBudget(context.Background(), "o", &Budget{MaxTurns: 1}); err != nil {
		t.Fatal(err)
	}
	runBudget(t, b, "o", "m", []budgetStep{{action: None}})
	runBudget(t, a, "o", "m", []budgetStep{{action: Terminate, kind: BudgetTurns, exceeded: true}})
	st, err := a.Store().Load(context.Background(), "s")
	if err != nil || st.Tokens != 1100 || st.Turns != 2 {
		t.Fatalf("state = %+v, %v; want 1100 tokens over 2 turns", st, err)
	}
}
