package policy

import (
	"context"
	"fmt"
	"path"

	"github.com/loopguard/loopguard/inspect"
)

// BudgetCategory is the category of a budget decision: a session that used
// its tokens or turns, loop or no loop. It is no detector family; it shares
// the category's place in headers, metrics and the timeline.
const BudgetCategory inspect.Category = "budget"

// BudgetWarnPercent is the share of a budget, in percent, after which the
// next request carries a warning.
const BudgetWarnPercent = 80

// Budget bounds one session: the tokens the upstream reported over it
// (prompt and completion of every answer) and its model calls. Zero is no
// bound; in an override, zero inherits and a negative value turns the
// bound off.
type Budget struct {
	MaxTokens int64 `toml:"session_max_tokens" json:"max_tokens,omitempty"`
	MaxTurns  int   `toml:"session_max_turns" json:"max_turns,omitempty"`
}

// over applies o's non-zero fields to b.
func (b Budget) over(o Budget) Budget {
	if o.MaxTokens != 0 {
		b.MaxTokens = o.MaxTokens
	}
	if o.MaxTurns != 0 {
		b.MaxTurns = o.MaxTurns
	}
	return b
}

// on reports whether b bounds anything.
func (b Budget) on() bool { return b.MaxTokens > 0 || b.MaxTurns > 0 }

// BudgetUse is a budget decision: which bound was reached, how much of it
// was used and the bound. It rides on Decision.Budget.
type BudgetUse struct {
	// Kind is "tokens" or "turns": the bound that fired (the one used the
	// most when both are over the warning share).
	Kind  string `json:"kind"`
	Used  int64  `json:"used"`
	Limit int64  `json:"limit"`
	// Exceeded: the budget is spent and the request is answered
	// BUDGET_EXCEEDED; false: the warning share is reached.
	Exceeded bool `json:"exceeded,omitempty"`
}

// Budget kinds.
const (
	BudgetTokens = "tokens"
	BudgetTurns  = "turns"
)

// budgetFor returns the bounds of a session of model: the configuration's,
// then the longest matching model glob's, then the session's own override.
func (p *Policy) budgetFor(st *State, model string) Budget {
	b := Budget{MaxTokens: p.cfg.SessionMaxTokens, MaxTurns: p.cfg.SessionMaxTurns}
	best := -1
	var mo Budget
	for glob, o := range p.cfg.Models {
		if ok, _ := path.Match(glob, model); ok && len(glob) > best {
			best, mo = len(glob), o
		}
	}
	b = b.over(mo)
	if st.Budget != nil {
		b = b.over(*st.Budget)
	}
	return b
}

// budgets reports whether any budget may apply: the configuration or a
// model override sets one. A session override alone is found in the state.
func (p *Policy) budgets() bool {
	if p.cfg.SessionMaxTokens > 0 || p.cfg.SessionMaxTurns > 0 {
		return true
	}
	for _, o := range p.cfg.Models {
		if o.on() {
			return true
		}
	}
	return false
}

// spend applies the session's budget to a decision made on st: a spent
// budget turns it into Terminate, the warning share adds a warning once,
// and a request that goes on to the model counts a turn. It reports
// whether st changed.
func (p *Policy) spend(st *State, d *Decision, model string) bool {
	b := p.budgetFor(st, model)
	if !b.on() {
		return false
	}
	d.Budgeted = true
	use, share := BudgetUse{}, -1.0
	for _, u := range []BudgetUse{
		{Kind: BudgetTokens, Used: st.Tokens, Limit: b.MaxTokens},
		{Kind: BudgetTurns, Used: int64(st.Turns), Limit: int64(b.MaxTurns)},
	} {
		if u.Limit <= 0 {
			continue
		}
		u.Exceeded = u.Used >= u.Limit
		if s := float64(u.Used) / float64(u.Limit); s > share {
			use, share = u, s
		}
	}
	switch {
	case use.Exceeded:
		// Nothing is counted: the model is not called.
		u := use
		d.Budget = &u
		d.Action, d.Would, d.Level, d.Urgency = Terminate, Terminate, -1, Critical
		if !d.Verdict.Loop {
			d.Verdict = inspect.Verdict{Category: BudgetCategory}
			d.Pattern, d.Brief = "", ""
		}
		return false
	case share*100 >= BudgetWarnPercent && !st.BudgetWarned:
		u := use
		d.Budget = &u
		st.BudgetWarned = true
		if d.Action == None || d.Action == "" {
			d.Action, d.Would, d.Urgency = Warn, Warn, Warning
		}
	}
	if d.Action != Terminate { // a loop's LOOP_DETECTED calls no model either
		st.Turns++
	}
	return true
}

// RecordUsage adds the tokens the upstream reported for an answer to
// session key's budget. The proxy calls it for the answers to requests
// whose decision was Budgeted, so that sessions without a budget cost no
// store call. Errors are the store's; the caller counts them and carries
// on.
func (p *Policy) RecordUsage(ctx context.Context, key string, tokens int64) error {
	if tokens <= 0 || key == "" {
		return nil
	}
	_, err := p.store.Update(ctx, key, func(st *State) error {
		st.Tokens += tokens
		st.Updated = p.now()
		return nil
	})
	if err != nil {
		return fmt.Errorf("record usage %s: %w", key, err)
	}
	return nil
}

// SetBudget sets session key's own budget, which wins over the
// configuration's and the model's where its fields are not zero; nil
// clears it.
func (p *Policy) SetBudget(ctx context.Context, key string, b *Budget) error {
	_, err := p.store.Update(ctx, key, func(st *State) error {
		if b == nil {
			st.Budget = nil
		} else {
			c := *b
			st.Budget = &c
		}
		st.Updated = p.now()
		return nil
	})
	if err != nil {
		return fmt.Errorf("set budget %s: %w", key, err)
	}
	return nil
}
