package inspect

import (
	"strings"
	"unicode/utf8"
)

// tool_repetition: the same call again and again.

// repeatThresholds returns the consecutive and windowed repeat thresholds
// for a call: its tool's overrides applied, times waitFactor for a call
// that waits.
func (in *inspection) repeatThresholds(c *Call) (int, int) {
	cons, win := in.lim.repeatConsecutive, in.lim.repeatInWindow
	if o, ok := in.e.cfg.Tools[c.Name]; ok {
		if o.RepeatConsecutive > 0 {
			cons = o.RepeatConsecutive
		}
		if o.RepeatInWindow > 0 {
			win = o.RepeatInWindow
		}
	}
	if isWait(c) {
		cons, win = cons*waitFactor, win*waitFactor
	}
	return cons, win
}

// minRepeatInWindow is the lowest windowed repeat threshold of any tool.
func (in *inspection) minRepeatInWindow() int {
	m := in.lim.repeatInWindow
	for _, o := range in.e.cfg.Tools {
		if o.RepeatInWindow > 0 {
			m = min(m, o.RepeatInWindow)
		}
	}
	return m
}

// toolRepetition: the same call (tool + canonical arguments) back to back,
// or often in the window, with the same normalised result. Identical calls
// whose results keep changing are polling and never count.
func (in *inspection) toolRepetition() (Detection, bool) {
	evs := in.evs
	if len(evs) == 0 {
		return Detection{}, false
	}
	last := len(evs) - 1
	L := &evs[last]
	thr, _ := in.repeatThresholds(L.c)
	// Trailing run of identical calls.
	i := last
	for i > 0 && evs[i-1].fp == L.fp {
		i--
	}
	n := last - i + 1
	if n >= thr {
		// The longest trailing streak with one outcome; calls without a
		// result (not sent back yet) neither break nor extend it.
		var ref *ev
		same, known, idx := 0, 0, []int(nil)
		for j := last; j >= i; j-- {
			x := &evs[j]
			if !x.has {
				continue
			}
			known++
			if ref == nil {
				ref = x
			}
			if !sameOutcome(ref, x) {
				break
			}
			same++
		}
		// Every result of the run an error, whatever its text: the same
		// call failing again and again is no progress even when the
		// messages differ (OpenHands' "repeating action, error" rule).
		errs := 0
		for j := last; j >= i; j-- {
			if x := &evs[j]; x.has {
				if !x.isErr {
					break
				}
				errs++
			}
		}
		switch {
		case same < thr && errs >= thr && !L.look:
			for j := i; j <= last; j++ {
				idx = append(idx, j)
			}
			d := Detection{Score: grow(strongBase, strongStep, errs, thr, 1), Evidence: in.evidence(idx)}
			d.Evidence.Threshold, d.Evidence.NoProgress = thr, true
			withOutcome(&d.Evidence, L.c)
			return d, true
		case same >= thr:
			for j := i; j <= last; j++ {
				idx = append(idx, j)
			}
			d := Detection{Score: grow(strongBase, strongStep, same, thr, 1), Evidence: in.evidence(idx)}
			d.Evidence.Threshold, d.Evidence.NoProgress = thr, true
			withOutcome(&d.Evidence, ref.c)
			return d, true
		case known == 0:
			for j := i; j <= last; j++ {
				idx = append(idx, j)
			}
			d := Detection{Score: grow(warnBase, warnStep, n, thr, warnCap), Evidence: in.evidence(idx)}
			d.Evidence.Threshold = thr
			return d, true
		}
		if pollThr := in.pollThreshold(L.c); n >= pollThr && in.revisions(i, last) {
			// Polling that does nothing else: the output changes, so
			// it is no evidence of no progress, but an agent that only
			// asks again and again is waiting without a plan. A warning
			// only (openclaw warns on arguments alone at ten).
			for j := i; j <= last; j++ {
				idx = append(idx, j)
			}
			d := Detection{Score: grow(warnBase, warnStep, n, pollThr, warnCap), Evidence: in.evidence(idx)}
			d.Evidence.Threshold = pollThr
			return d, true
		}
	}
	// Windowed: the same call with the same non-trivial outcome, not
	// necessarily back to back.
	best, bestN := -1, 0
	minWin := in.minRepeatInWindow()
	for a := in.win; a < len(evs); a++ {
		x := &evs[a]
		if !x.has || (x.ack && !x.isErr) || x.neg {
			continue
		}
		// The identical calls bound the count: when they cannot beat the
		// best so far, or reach any threshold, their results need no
		// hashing (the outcome is the same without it).
		ub := 0
		for b := a; b < len(evs); b++ {
			if evs[b].fp == x.fp {
				ub++
			}
		}
		if ub <= bestN || ub < minWin {
			continue
		}
		cnt := 0
		for b := a; b < len(evs); b++ {
			if evs[b].fp == x.fp && sameOutcome(x, &evs[b]) {
				cnt++
			}
		}
		if cnt > bestN {
			best, bestN = a, cnt
		}
	}
	if best < 0 {
		return Detection{}, false
	}
	_, thrWin := in.repeatThresholds(evs[best].c)
	if bestN < thrWin {
		return Detection{}, false
	}
	var idx []int
	for b := best; b < len(evs); b++ {
		if evs[b].fp == evs[best].fp && sameOutcome(&evs[best], &evs[b]) {
			idx = append(idx, b)
		}
	}
	d := Detection{Score: grow(strongBase, strongStep, bestN, thrWin, 1), Evidence: in.evidence(idx)}
	d.Evidence.Threshold, d.Evidence.NoProgress = thrWin, true
	// The group's latest result: the same outcome as the first, the one
	// the agent saw last.
	withOutcome(&d.Evidence, evs[idx[len(idx)-1]].c)
	return d, true
}

// pollRepeats is how many identical calls in a row, their outputs
// changing, make a polling warning; waitFactor times more for a call that
// waits.
const pollRepeats = 10

// pollThreshold returns the polling threshold of a call.
func (in *inspection) pollThreshold(c *Call) int {
	if isWait(c) {
		return pollRepeats * waitFactor
	}
	return pollRepeats
}

// revisions reports whether the latest answers of evs[i..last] are
// revisions of one another, as a status, a clock or a growing listing
// are: most runs of three words of each answer were in the answer before
// it. Pages of a long output (Roo Code's read_output) are new text every
// time, which is reading, not waiting. Only the last three answers are
// compared: their evidence text is what the session cache keeps of them
// (evidenceZone).
func (in *inspection) revisions(i, last int) bool {
	var prev map[uint64]bool
	kept, pairs := 0.0, 0
	for j := max(i, last-2); j <= last; j++ {
		x := &in.evs[j]
		if !x.has {
			prev = nil
			continue
		}
		cur := shingles(x.c.outcome())
		if prev != nil && len(cur) > 0 {
			pairs++
			kept += overlap(prev, cur)
		}
		prev = cur
	}
	return pairs > 0 && kept/float64(pairs) >= 0.5
}

// shingles returns the hashes of a text's runs of three words (of its
// words, when it has fewer than three). Words are runs of letters, digits
// and '_', so that compact JSON ({"state":"running","done":45}) has words
// as prose does.
func shingles(text string) map[uint64]bool {
	words := strings.FieldsFunc(text, func(r rune) bool { return r < utf8.RuneSelf && !isWordByte(byte(r)) })
	if len(words) == 0 {
		return nil
	}
	set := make(map[uint64]bool, len(words))
	if len(words) < 3 {
		set[hashString(strings.Join(words, " "))] = true
		return set
	}
	for k := 2; k < len(words); k++ {
		set[hashString(words[k-2]+" "+words[k-1]+" "+words[k])] = true
	}
	return set
}

// overlap is the share of cur's members that prev has.
func overlap(prev, cur map[uint64]bool) float64 {
	if len(cur) == 0 {
		return 0
	}
	n := 0
	for h := range cur {
		if prev[h] {
			n++
		}
	}
	return float64(n) / float64(len(cur))
}

// waitFactor multiplies the repetition thresholds of calls that wait
// (sleep, wait_for): polling a job until it finishes repeats by design.
const waitFactor = 3

// isWait reports a call that waits: a wait/sleep tool, or a shell command
// that starts with or chains a sleep.
func isWait(c *Call) bool {
	name := strings.ToLower(c.Name)
	if strings.Contains(name, "sleep") || strings.Contains(name, "wait") {
		return true
	}
	cmd := strings.TrimSpace(c.Primary) // the command, for shell tools
	if cmd == "" {
		return false
	}
	return strings.HasPrefix(cmd, "sleep ") || strings.Contains(cmd, "; sleep ") || strings.Contains(cmd, "&& sleep ") ||
		strings.HasPrefix(cmd, "wait") || strings.HasPrefix(cmd, "timeout ")
}
