package proxy

import (
	"context"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
)

// recordUsage adds an answer's reported usage to session key's budget
// (answerObserver.countUsage). It fails open: a store that fails leaves the tokens uncounted, logged and
// counted as a store fail-open.
func (p *pipeline) recordUsage(key string, u observe.Usage) {
	n := int64(u.Input) + int64(u.Output)
	if key == "" || n <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.storeTimeout)
	defer cancel()
	if err := p.policy.RecordUsage(ctx, key, n); err != nil {
		p.failOpen(nil, observe.StageStore, err)
	}
}

// budgetOf is inject's view of a budget decision.
func budgetOf(b *policy.BudgetUse) *inject.Budget {
	return &inject.Budget{Kind: b.Kind, Used: b.Used, Limit: b.Limit}
}
