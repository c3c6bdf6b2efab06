package inspect

import (
	"strings"
)

// tool_cycle: a sequence of calls repeating back to back.

// toolCycle: a sequence of 2..5 different calls repeating back to back
// (A,B,A,B or A,B,C,A,B,C). It reports at CycleRepeats occurrences with a
// low score (only a help to other rules) and fires on its own one
// occurrence later, strongly when every position's result is unchanged.
// A cycle of three calls or more needs longerCycleRounds more, unless a
// call fails alike at the same point of every round: a round of three
// different calls is most often work (read, edit, test), and the field's
// detectors wait for five rounds of it (gemini-cli) where they stop an
// A,B ping-pong after three (OpenHands).
func (in *inspection) toolCycle() (Detection, bool) {
	evs := in.evs
	L := len(evs)
	for k := 2; k <= 5; k++ {
		if L < 2*k {
			break
		}
		m := 0 // trailing matches of evs[j] == evs[j-k]
		for j := L - 1; j-k >= 0 && in.cycleMatch(&evs[j], &evs[j-k]); j-- {
			m++
		}
		occ := (m + k) / k
		thr := in.lim.CycleRepeats
		if occ < thr {
			continue
		}
		// The cycle's members must not all be one call (that is
		// tool_repetition) nor a shorter cycle (found at a smaller k).
		distinct := false
		for j := L - k + 1; j < L; j++ {
			if evs[j].fp != evs[L-k].fp {
				distinct = true
			}
		}
		if !distinct {
			return Detection{}, false
		}
		span := occ * k
		first := L - span
		known, sameAll, changed, fails := 0, true, false, false
		for j := first + k; j < L; j++ {
			a, b := &evs[j], &evs[j-k]
			if !a.has || !b.has {
				continue
			}
			known++
			if !sameOutcome(a, b) {
				sameAll, changed = false, true
			}
			fails = fails || a.isErr || a.neg
		}
		noProgress := known > 0 && sameAll
		if k > 2 && !(noProgress && fails) {
			thr += longerCycleRounds
			if occ < thr {
				continue
			}
		}
		for j := L - k; j < L; j++ {
			if isWait(evs[j].c) {
				// A cycle that sleeps between checks is an agent waiting
				// for something to finish; give it time before calling it
				// stuck (the field's most common false positive).
				thr *= waitFactor
				if occ < thr {
					return Detection{}, false
				}
				break
			}
		}
		var score float64
		switch {
		case noProgress && occ > thr:
			score = grow(0.93, strongStep, occ, thr+1, 1)
		case noProgress && fails:
			// The same failure at the same point of every round: two
			// rounds are enough (reading a file, then an edit of it that
			// fails the same way, twice).
			score = strongBase
		case noProgress:
			score = 0.62
		case changed: // results move: likely progress, warn only when it goes on
			score = grow(0.45, 0.1, occ, thr, warnCap)
		case occ > thr:
			score = grow(0.78, warnStep, occ, thr+1, warnCap)
		default:
			score = 0.5
		}
		idx := make([]int, 0, span)
		for j := first; j < L; j++ {
			idx = append(idx, j)
		}
		d := Detection{Score: score, Evidence: in.evidence(idx)}
		var el []string
		for j := L - k; j < L; j++ {
			el = append(el, callElement(evs[j].c))
		}
		d.Evidence.Element = shorten(strings.Join(el, " -> "), 120)
		d.Evidence.Count, d.Evidence.Threshold, d.Evidence.NoProgress = occ, thr, noProgress
		if noProgress {
			withOutcome(&d.Evidence, evs[L-1].c)
		}
		return d, true
	}
	return Detection{}, false
}

// longerCycleRounds is how many more rounds than CycleRepeats a cycle of
// three calls or more needs.
const longerCycleRounds = 2

// cycleMatch reports whether two calls hold the same place in a cycle:
// the same call, or an edit of the same file rejected with the same error
// (retried with another old_str that matches nothing again). A shell
// command that edits and then fails did change something: only the same
// command holds the same place.
func (in *inspection) cycleMatch(a, b *ev) bool {
	if a.fp == b.fp {
		return true
	}
	return a.isErr && b.isErr && a.err == b.err && a.meaningful && a.c.Name == b.c.Name &&
		editCall(a.c) && a.c.known().target == b.c.known().target
}

// editCall reports a call of an edit tool: replace-style arguments or a
// patch.
func editCall(c *Call) bool {
	if strings.Contains(c.Args, patchFile) {
		return true
	}
	for _, kp := range editPairs {
		if strings.Contains(c.Args, `"`+kp[0]+`"`) {
			return true
		}
	}
	return false
}
