package inspect

import (
	"strings"
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
