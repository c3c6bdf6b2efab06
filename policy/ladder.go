package policy

import (
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/loopguard/loopguard/inspect"
)

// position is where the request history stands: the index of its last step
// and its message count.
type position struct {
	step     int // -1 when the history has no step or is unknown
	messages int
}

func positionOf(t *inspect.Trajectory) position {
	if t == nil {
		return position{step: -1}
	}
	return position{step: len(t.Steps) - 1, messages: t.Messages}
}

// newSince reports whether the history holds steps the pattern has not seen
// at its last intervention. A retry of the same request has the same
// position; a shorter history means the agent compacted it, which a retry
// never does, so it counts as new.
func (p *Pattern) newSince(pos position) bool {
	if pos.step < 0 && pos.messages == 0 {
		return false // unknown
	}
	return pos.step > p.Seen || pos.messages < p.Messages
}

// decide is the ladder: a pure function of the state, the verdict and the
// history position, which it updates in st; changed reports whether it did.
// It may run more than once per request (optimistic stores retry), so it
// reads the clock only through now.
func (p *Policy) decide(st *State, v inspect.Verdict, t *inspect.Trajectory, now time.Time) (d Decision, changed bool) {
	d = Decision{Action: None, Level: -1, Verdict: v}
	pos := positionOf(t)

	// A cut stream is reported once, by the next request.
	if n := len(st.Cuts); n > 0 {
		c := st.Cuts[n-1]
		d.Cut = &c
		st.Cuts = nil
		changed = true
	}

	// A state written under another ladder (a config change, a replica
	// configured differently) may hold any level: clamp, never index out of
	// range.
	for k, pt := range st.Patterns {
		if pt == nil { // "null" in JSON from redis
			delete(st.Patterns, k)
			continue
		}
		pt.Level = max(0, min(pt.Level, len(p.cfg.Ladder)-1))
	}

	// The judge's verdict on an earlier turn counts now, once, through the
	// same aggregator as the rules' findings.
	if j := st.Judgement; j != nil && p.merge != nil && pos.step > j.Step {
		st.Judgement = nil
		changed = true
		d.Judgement = j
		if j.Stuck {
			model := ""
			if t != nil {
				model = t.Model
			}
			// Last is now: the judge saw the loop go on after any earlier
			// intervention, so it is neither stale nor a retry.
			v = p.merge(v, inspect.Detection{Category: inspect.SemanticLoop, Score: j.Confidence,
				Evidence: judgedEvidence(t, j, pos.step)}, model)
			d.Verdict = v
		}
	}

	key := ""
	if v.Loop && stale(st, strongest(v), pos) {
		// Every occurrence the detector counted came before an earlier
		// intervention, and the agent has stepped since: it is working on
		// something else, and counting the old occurrences again would
		// deny it the room to recover that an intervention promises
		// (docs/design.md section 3: "the count restarts").
		d.Stale = true
	} else if v.Loop {
		key = patternKey(v)
		d.Pattern = key
		changed = p.loop(st, &d, key, v, pos, now) || changed
	}

	// Every other pattern: dropped once its loop stopped and the agent moved
	// on; re-injected while the agent has not stepped since.
	keys := make([]string, 0, len(st.Patterns))
	for k := range st.Patterns {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic constraint order
	for _, k := range keys {
		pt := st.Patterns[k]
		if !pt.Active || k == key {
			continue
		}
		if pt.newSince(pos) {
			pt.Active = false
			st.Recoveries++
			d.Recovered = append(d.Recovered, k)
			changed = true
			continue
		}
		d.Constraints = append(d.Constraints, constraintOf(k, pt))
	}

	// Without a loop the action stays None: constraints still active and a
	// pending cut ride along in d.Constraints and d.Cut, re-injected rather
	// than counted as a new intervention.
	d.Would = d.Action
	d.Failed = failed(st, key)
	if changed {
		st.Updated = now
	}
	return d, changed
}

// stale reports whether the evidence of a loop lies wholly at or before the
// history position of the session's latest intervention while the request
// has steps after it.
func stale(st *State, ev inspect.Evidence, pos position) bool {
	horizon := -1
	for _, pt := range st.Patterns {
		horizon = max(horizon, pt.Seen)
	}
	return horizon >= 0 && ev.Last <= horizon && pos.step > horizon
}

// loop applies the ladder to the verdict's pattern and reports whether st
// changed.
func (p *Policy) loop(st *State, d *Decision, key string, v inspect.Verdict, pos position, now time.Time) bool {
	ev := strongest(v)
	d.Brief = brief(v, ev)
	ladder := p.cfg.Ladder
	pt, known := st.Patterns[key]
	level := 0
	escalate := true
	if known {
		switch {
		case ev.Last > pt.Step:
			// The loop went on after the last intervention: one rung up.
			level = min(pt.Level+1, len(ladder)-1)
		default:
			// A retry, or the old occurrences reported again: same rung.
			level, escalate = pt.Level, false
		}
	}
	// Ending a session needs no-progress evidence; without it stay on the
	// rung below (or warn, when terminate is the first rung).
	for level >= 0 && ladder[level] == Terminate && !ev.NoProgress {
		level--
	}
	action := Warn
	if level >= 0 {
		action = ladder[level]
	} else {
		level = 0
	}

	d.Action, d.Level = action, level
	d.Urgency = p.urgency(level)
	d.Reapplied = known && !escalate
	d.Collapse = action == Reset || (action == Constrain && p.cfg.ResetOnConstrain)

	if d.Reapplied {
		d.Resets = st.Resets
		if pt.Active {
			d.Constraints = append(d.Constraints, constraintOf(key, pt))
		}
		return false
	}

	if !known {
		if st.Patterns == nil {
			st.Patterns = make(map[string]*Pattern)
		}
		pt = &Pattern{FirstSeen: now}
		st.Patterns[key] = pt
	}
	pt.Level = level
	pt.Category = v.Category
	pt.Brief = clip(d.Brief)
	pt.Summary = clip(v.Summary())
	pt.Tool, pt.Args = clip(ev.Tool), clip(ev.Args)
	pt.Count = ev.Count
	pt.Step = ev.Last
	pt.Seen, pt.Messages = pos.step, pos.messages
	pt.LastSeen = now
	pt.Active = action == Constrain || action == Reset || action == Terminate
	if d.Collapse {
		st.Resets++
	}
	d.Resets = st.Resets
	if pt.Active {
		d.Constraints = append(d.Constraints, constraintOf(key, pt))
	}
	st.addIntervention(Intervention{Action: action, Level: level, Category: v.Category, Pattern: key, Brief: pt.Brief, At: now})
	st.prunePatterns(key)
	return true
}

// urgency is critical when the rung is terminate or the next one is.
func (p *Policy) urgency(level int) Urgency {
	l := p.cfg.Ladder
	if level >= 0 && level < len(l) && (l[level] == Terminate || (level+1 < len(l) && l[level+1] == Terminate)) {
		return Critical
	}
	return Warning
}

// failed lists the latest brief of each pattern intervened on in this
// session, oldest first, except the current pattern, which the injected
// block describes in full: the other approaches that already failed.
func failed(st *State, key string) []string {
	var out []string
	seen := make(map[string]bool, len(st.Interventions))
	for i := len(st.Interventions) - 1; i >= 0; i-- {
		iv := st.Interventions[i]
		if iv.Pattern == key || iv.Brief == "" || seen[iv.Pattern] {
			continue
		}
		seen[iv.Pattern] = true
		out = append(out, iv.Brief)
	}
	slices.Reverse(out)
	return out
}

func constraintOf(key string, pt *Pattern) Constraint {
	return Constraint{Pattern: key, Category: pt.Category, Level: pt.Level, Brief: pt.Brief,
		Summary: pt.Summary, Tool: pt.Tool, Args: pt.Args}
}

// strongest returns the evidence of the strongest detection.
func strongest(v inspect.Verdict) inspect.Evidence {
	if len(v.Detections) == 0 {
		return inspect.Evidence{Last: -1}
	}
	return v.Detections[0].Evidence
}

// patternKey is the verdict's key, or one built from the category and the
// repeated element when inspect gave none.
func patternKey(v inspect.Verdict) string {
	if v.PatternKey != "" {
		return clip(v.PatternKey)
	}
	ev := strongest(v)
	return "p:" + string(v.Category) + ":" + hashString(ev.Tool+"\x00"+ev.Args+"\x00"+ev.Element)
}

// brief is Verdict.Brief, or "tool(args) xN" from the evidence.
func brief(v inspect.Verdict, ev inspect.Evidence) string {
	if b := v.Brief(); b != "" {
		return b
	}
	el := ev.Element
	if el == "" && ev.Tool != "" {
		el = ev.Tool + "(" + ev.Args + ")"
	}
	if el == "" {
		el = string(v.Category)
	}
	if ev.Count > 0 {
		el += " x" + strconv.Itoa(ev.Count)
	}
	return clip(el)
}

func hashString(s string) string {
	h := fnvOffset
	h.add(s)
	return hex16(uint64(h))
}
