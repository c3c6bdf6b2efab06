package observe

import (
	"time"

	"github.com/loopguard/loopguard/policy"
)

// Recovery accounting: whether an intervention was followed by the loop coming back.

type recKey struct{ category, level int }

// recover counts an intervention's outcome; metrics counts it in this
// replica's metrics too (not for other replicas' outcomes, which their own
// metrics count).
func (r *Recorder) recover(cat, level int, recovered, metrics bool) {
	k := recKey{cat, level}
	c := r.recovery[k]
	if c == nil {
		c = new([2]int)
		r.recovery[k] = c
	}
	if recovered {
		c[0]++
	} else {
		c[1]++
	}
	if metrics && r.metrics != nil {
		r.metrics.recovery(cat, level, recovered)
	}
}

// recoveries settles the outcomes of s's pending interventions that d
// shows, and makes d's own intervention pending. r.mu is held.
func (r *Recorder) recoveries(s *session, d *policy.Decision, now time.Time) {
	for _, k := range d.Recovered {
		p, ok := s.pending[k]
		if !ok {
			continue // an intervention this recorder did not see (restart, eviction, another replica)
		}
		delete(s.pending, k)
		r.outcome(s, &Entry{At: now, Session: s.Key, Kind: KindRecovery, Category: categories[p.category],
			Brief: p.brief, Pattern: k, Level: p.level, Outcome: outcomeRecovered})
	}
	if !isIntervention(d.Action) || d.Pattern == "" {
		return
	}
	lvl := levelIndex(d.Level)
	if p, ok := s.pending[d.Pattern]; ok && !d.Reapplied {
		// The pattern went on after the intervention: the ladder moved up.
		r.outcome(s, &Entry{At: now, Session: s.Key, Kind: KindRecovery, Category: categories[p.category],
			Brief: p.brief, Pattern: d.Pattern, Level: p.level, Outcome: outcomeLoopedAgain})
	}
	pend(s, d.Pattern, pending{category: categoryIndex(d.Verdict.Category), level: lvl, brief: d.Brief})
}

// pend makes an intervention on pattern pending until a later request
// tells its outcome. r.mu is held.
func pend(s *session, pattern string, p pending) {
	if s.pending == nil {
		s.pending = make(map[string]pending, 2)
	}
	if _, ok := s.pending[pattern]; !ok && len(s.pending) >= policy.MaxPatterns {
		return
	}
	s.pending[pattern] = p
}

// outcome records recovery entry e: an intervention at level index
// e.Level whose pattern stopped or came back. r.mu is held.
func (r *Recorder) outcome(s *session, e *Entry) {
	recovered := e.Outcome == outcomeRecovered
	if recovered {
		s.Recovered++
		if e.remote && latest(s, e) {
			// This replica's requests tell it by the decision (stateAfter).
			s.State = StateRecovered
		}
	} else {
		s.LoopedAgain++
	}
	r.recover(categoryIndex(e.Category), levelIndex(e.Level), recovered, !e.remote)
	r.add(s, e)
}

// stateAfter is a session's state after a request on which action was
// taken; loop says its history showed a loop, recovered that an earlier
// pattern stopped.
func stateAfter(prev string, action policy.Action, loop, recovered bool) string {
	switch action {
	case policy.Warn:
		return StateWarned
	case policy.Constrain, policy.Reset:
		return StateConstrained
	case policy.Terminate:
		return StateTerminated
	}
	switch {
	case loop:
		return StateLooping
	case recovered:
		return StateRecovered
	case prev == StateLooping || prev == StateCut || prev == "":
		return StateActive
	}
	return prev
}
