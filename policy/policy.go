package policy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/rs/zerolog"
)

// Urgency is the urgency attribute of an injected block.
type Urgency string

// Urgencies: critical when the next step of the ladder ends the session.
const (
	Warning  Urgency = "warning"
	Critical Urgency = "critical"
)

// Decision is what policy decided for one request, and everything inject
// needs to carry it out. The zero Decision passes the request through.
type Decision struct {
	// Mode is the mode the request ran under, after overrides.
	Mode Mode
	// Action is the action to take: None, Warn, Constrain, Reset or
	// Terminate, or Shadow in shadow mode. Action None may still carry
	// Constraints to re-inject and a Cut to report: a request is passed
	// through unchanged only when all three are empty.
	Action Action
	// Would is the action enforce mode takes; in shadow mode the action
	// that was not taken. Equal to Action outside shadow mode.
	Would Action
	// Level is the index of Would in the ladder; -1 when no rung applies.
	Level   int
	Urgency Urgency
	// Verdict is the verdict the decision was made on.
	Verdict inspect.Verdict
	// Pattern is the verdict's pattern key ("" without a loop).
	Pattern string
	// Brief names the pattern for people: Verdict.Brief(), or a brief built
	// from the evidence when that is empty.
	Brief string
	// Collapse asks inject to collapse the looping span of the history: the
	// action is reset, or constrain with reset_on_constrain.
	Collapse bool
	// Resets is the session's number of collapses so far, this one
	// included: the reset="N" attribute.
	Resets int
	// Reapplied is true when the action repeats an earlier one without
	// escalating: a retry of the same request, or a loop reported again
	// with no new occurrence. Nothing new is recorded then.
	Reapplied bool
	// Failed are the briefs of the other patterns this session was already
	// warned or constrained about, oldest first, one per pattern: the
	// approaches that already failed. The current pattern is not among them.
	Failed []string
	// Constraints are the patterns whose constraints are active after this
	// decision, to be injected into this request; the current pattern is
	// among them when Action is Constrain or Reset.
	Constraints []Constraint
	// Recovered are the pattern keys whose loops stopped with this request,
	// for recovery accounting.
	Recovered []string
	// Cut is a stream cut of an earlier response not reported yet (it is
	// consumed now): inject tells the model its last answer degenerated.
	Cut *Cut
	// CrossSession is true when at least Config.GlobalSessions sessions
	// looped on this pattern within Config.GlobalWindow; GlobalSessions
	// holds the count seen (redis store only).
	CrossSession   bool
	GlobalSessions int
	// Incident is true for the one decision per GlobalWindow that opened a
	// cross-session incident (counted once in metrics).
	Incident bool
	// Judgement is the judge's verdict this decision consumed, nil if none:
	// when it was stuck, its semantic_loop detection is in Verdict.
	Judgement *Judgement
	// StoreFailed is true when the store could not be read or written and
	// the decision was made from the request history alone (fail open).
	// Stale is true when the verdict's loop was left alone because all its
	// occurrences came before an earlier intervention and the agent has
	// moved on since (Action None).
	Stale       bool
	StoreFailed bool
	// Budget is set when the session's budget decided: the warning share
	// reached (a warning joins the request) or the budget spent (Action
	// Terminate, answered BUDGET_EXCEEDED). Budgeted says a budget applies
	// to the session, so that the answer's usage is to be recorded
	// (Policy.RecordUsage).
	Budget   *BudgetUse
	Budgeted bool
}

// Constraint is an active pattern to re-inject.
type Constraint struct {
	Pattern  string
	Category inspect.Category
	Level    int
	Brief    string
	Summary  string
	Tool     string
	Args     string
}

// Policy walks each session's escalation ladder. It is safe for concurrent
// use.
type Policy struct {
	cfg   Config
	store Store
	log   zerolog.Logger
	now   func() time.Time // tests replace it
	// merge adds a judge's detection to a verdict through inspect's
	// aggregator (SetJudgeMerge); nil: judgements are ignored.
	merge MergeFunc
}

// MergeFunc adds d to v and aggregates again under model's thresholds, as
// inspect.Engine.WithDetection does.
type MergeFunc func(v inspect.Verdict, d inspect.Detection, model string) inspect.Verdict

// SetJudgeMerge makes the judgements recorded with RecordJudgement count
// on a session's next request, added to its verdict by merge. It is called
// once, before the first Decide.
func (p *Policy) SetJudgeMerge(merge MergeFunc) { p.merge = merge }

// RecordJudgement stores the judge's verdict j on session key, for the
// session's next request to consume. Errors are the store's; the caller
// counts them and carries on (the judge fails open).
func (p *Policy) RecordJudgement(ctx context.Context, key string, j Judgement) error {
	if j.At.IsZero() {
		j.At = p.now()
	}
	_, err := p.store.Update(ctx, key, func(st *State) error {
		st.Judgement = &j
		st.Updated = j.At
		return nil
	})
	if err != nil {
		return fmt.Errorf("record judgement %s: %w", key, err)
	}
	return nil
}

// New returns a Policy over store. cfg's zero fields take their defaults;
// call cfg.Validate first to report configuration errors. A nil store means
// a MemoryStore sized by cfg.
func New(cfg Config, store Store, logger zerolog.Logger) *Policy {
	cfg = cfg.withDefaults()
	if store == nil {
		store = NewMemoryStore(cfg.MaxSessions, cfg.TTL)
	}
	return &Policy{cfg: cfg, store: store, log: logger, now: time.Now}
}

// NewStore builds the store cfg names. The caller closes it (Policy.Close
// does) when it implements io.Closer.
func NewStore(cfg Config) (Store, error) {
	cfg = cfg.withDefaults()
	switch cfg.Store {
	case StoreMemory:
		return NewMemoryStore(cfg.MaxSessions, cfg.TTL), nil
	case StoreRedis:
		return NewRedisStore(cfg)
	}
	return nil, fmt.Errorf("policy: store: %q is not memory or redis", cfg.Store)
}

// Config returns the configuration in use, defaults filled in.
func (p *Policy) Config() Config { return p.cfg }

// Store returns the store in use.
func (p *Policy) Store() Store { return p.store }

// Close closes the store when it can be closed.
func (p *Policy) Close() error {
	if c, ok := p.store.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// RequestMode returns the mode of one request: the configured mode, lowered
// to the X-Loopguard-Mode header's value (shadow or off) when the config
// allows client overrides. An empty, unknown or raising header is ignored.
func (p *Policy) RequestMode(header string) Mode {
	m := p.cfg.Mode
	if !p.cfg.AllowClientOverride || header == "" {
		return m
	}
	if o, ok := ParseMode(header); ok && o.rank() < m.rank() {
		return o
	}
	return m
}

// Decide turns v, the verdict on the request history t, into a Decision for
// session key under mode, and records it in the store (enforce mode only).
//
// Decide never fails a request. When the store fails or times out, the
// decision is made as for a fresh session (the history alone: a loop gets
// the first rung), logged without content, and marked StoreFailed; the
// returned error stays nil, because the decision is still the one to apply.
// The error is non-nil only when ctx was already done on entry: the client
// is gone and nothing was decided.
//
// In shadow mode Decide reads the state, computes what enforce would do
// (Decision.Would) and writes nothing to the session; Action is Shadow. The
// cross-session count is still recorded in shadow mode: it is detection,
// and it changes no request. In off mode it
// returns a None decision at once. A session's admin mode override lowers
// mode further.
func (p *Policy) Decide(ctx context.Context, key string, v inspect.Verdict, t *inspect.Trajectory, mode Mode) (Decision, error) {
	if mode == "" {
		mode = p.cfg.Mode
	}
	if mode == ModeOff {
		return Decision{Mode: ModeOff, Action: None, Would: None, Level: -1}, nil
	}
	if err := ctx.Err(); err != nil {
		return Decision{Mode: mode, Action: None, Would: None, Level: -1}, err
	}
	now := p.now()
	var (
		d        Decision
		storeErr error
	)
	if mode == ModeShadow {
		st, err := p.store.Load(ctx, key)
		if err != nil {
			storeErr, st = err, State{}
		}
		d, _ = p.decide(&st, v, t, now)
		if st.Mode != "" && st.Mode.rank() < mode.rank() {
			mode = st.Mode
		}
	} else {
		op := decideOps.Get().(*decideOp)
		op.p, op.v, op.t, op.now, op.mode = p, v, t, now, mode
		_, err := p.store.Update(ctx, key, op.fn)
		d = op.d
		*op = decideOp{fn: op.fn}
		decideOps.Put(op)
		switch {
		case err == errUnchanged:
		case err == errOverridden:
			mode = d.Mode
		case err != nil:
			storeErr = err
			var fresh State
			d, _ = p.decide(&fresh, v, t, now)
		}
	}
	d.Mode = mode
	d.StoreFailed = storeErr != nil
	if storeErr != nil {
		p.log.Warn().Err(storeErr).Str("session", key).Msg("session store failed; deciding from history alone")
	}
	if d.Verdict.Loop && mode != ModeOff {
		p.recordGlobal(ctx, key, &d, now)
	}
	switch mode {
	case ModeShadow:
		d.Action = Shadow
	case ModeOff:
		d = Decision{Mode: ModeOff, Action: None, Would: None, Level: -1}
	}
	if d.Would != None {
		// Debug: the proxy logs each loop once at info with its outcome.
		p.log.Debug().Str("session", key).Str("mode", string(mode)).Str("action", string(d.Would)).
			Int("level", d.Level).Str("category", string(v.Category)).Str("pattern", d.Pattern).
			Bool("reapplied", d.Reapplied).Msg("loop decision")
	}
	return d, nil
}

// decideOp is a decision made in a store's Update. Update's function
// escapes (the store is an interface), and with it whatever a closure
// would capture: a pooled op, its function made once, costs a request no
// allocation.
type decideOp struct {
	fn   func(*State) error // op.apply
	p    *Policy
	v    inspect.Verdict
	t    *inspect.Trajectory
	now  time.Time
	mode Mode
	d    Decision
}

var decideOps = sync.Pool{New: func() any {
	op := new(decideOp)
	op.fn = op.apply
	return op
}}

func (op *decideOp) apply(st *State) error {
	if st.Mode != "" && st.Mode.rank() < op.mode.rank() {
		// An admin override: decide without writing, as shadow does.
		c := st.Clone()
		op.d, _ = op.p.decide(&c, op.v, op.t, op.now)
		op.d.Mode = st.Mode
		return errOverridden
	}
	var changed bool
	op.d, changed = op.p.decide(st, op.v, op.t, op.now)
	op.d.Mode = op.mode
	if op.p.budgets() || st.Budget != nil {
		model := ""
		if op.t != nil {
			model = op.t.Model
		}
		if op.p.spend(st, &op.d, model) {
			st.Updated = op.now
			changed = true
		}
	}
	if !changed {
		// Most requests change nothing; skipping the write keeps
		// loop-free sessions out of the store entirely.
		return errUnchanged
	}
	return nil
}

// Sentinels that abort an Update so that nothing is written: the session is
// overridden to a lower mode, or the decision changed nothing.
var (
	errOverridden = errors.New("policy: session mode overridden")
	errUnchanged  = errors.New("policy: session state unchanged")
)

// recordGlobal notes the pattern in the cross-session set when the store is
// shared, and logs an incident once per window.
func (p *Policy) recordGlobal(ctx context.Context, key string, d *Decision, now time.Time) {
	g, ok := p.store.(GlobalRecorder)
	if !ok || d.Pattern == "" || p.cfg.GlobalSessions <= 0 {
		return
	}
	n, incident, err := g.RecordPattern(ctx, d.Pattern, key, now, p.cfg.GlobalWindow, p.cfg.GlobalSessions)
	if err != nil {
		p.log.Warn().Err(err).Str("pattern", d.Pattern).Msg("cross-session record failed")
		return
	}
	d.GlobalSessions = n
	d.CrossSession = n >= p.cfg.GlobalSessions
	d.Incident = incident
	if incident {
		p.log.Warn().Str("pattern", d.Pattern).Str("category", string(d.Verdict.Category)).
			Int("sessions", n).Dur("window", p.cfg.GlobalWindow).Msg("global loop incident: one pattern looping in many sessions")
	}
}

// RecordCut notes that the proxy cut a degenerate stream of session key; the
// session's next request reports it to the model. Errors are the store's;
// the caller logs them and carries on.
func (p *Policy) RecordCut(ctx context.Context, key string, c Cut) error {
	if c.At.IsZero() {
		c.At = p.now()
	}
	_, err := p.store.Update(ctx, key, func(st *State) error {
		st.addCut(c)
		st.Updated = c.At
		return nil
	})
	if err != nil {
		return fmt.Errorf("record cut %s: %w", key, err)
	}
	return nil
}

// SetMode sets (or, with "", clears) the admin mode override of session key.
func (p *Policy) SetMode(ctx context.Context, key string, m Mode) error {
	if m != "" {
		if _, ok := ParseMode(string(m)); !ok {
			return fmt.Errorf("policy: mode %q is not enforce, shadow or off", m)
		}
	}
	_, err := p.store.Update(ctx, key, func(st *State) error {
		st.Mode = m
		st.Updated = p.now()
		return nil
	})
	if err != nil {
		return fmt.Errorf("set mode %s: %w", key, err)
	}
	return nil
}

// ResetSession forgets session key's ladder, interventions and cuts, keeping
// its mode override and the run that owns it.
func (p *Policy) ResetSession(ctx context.Context, key string) error {
	_, err := p.store.Update(ctx, key, func(st *State) error {
		// The budget is no loop: its use and override stay.
		*st = State{Mode: st.Mode, Opening: st.Opening, Tokens: st.Tokens, Turns: st.Turns,
			BudgetWarned: st.BudgetWarned, Budget: st.Budget, Updated: p.now()}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reset session %s: %w", key, err)
	}
	return nil
}
