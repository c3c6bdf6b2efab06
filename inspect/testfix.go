package inspect

import (
	"slices"
)

// test_fix_cycle: consecutive failing runs of the same test or build command.

// testFixCycle: the same test or build command failing run after run,
// with other work in between. The same failure every time is no progress;
// a different failure every time is debugging and stays below warning.
func (in *inspection) testFixCycle() (Detection, bool) {
	evs := in.evs
	r := in.recentError(false)
	if r < 0 {
		return Detection{}, false
	}
	fp := evs[r].fp
	var idx []int
	for a := r; a >= 0; a-- {
		x := &evs[a]
		if x.fp != fp || !x.has {
			continue
		}
		if !x.isErr {
			break
		}
		idx = append(idx, a)
	}
	thr := in.lim.testFixCount
	if len(idx) < thr {
		return Detection{}, false
	}
	slices.Reverse(idx)
	// How often does the most common failure come back?
	top := 0
	for _, a := range idx {
		c := 0
		for _, b := range idx {
			if evs[a].err == evs[b].err {
				c++
			}
		}
		top = max(top, c)
	}
	if in.changingObservation(idx) {
		return Detection{}, false
	}
	d := Detection{Evidence: in.evidence(idx)}
	switch {
	case in.attemptsDiffer(idx):
		// A rebuild after each different edit is progress even when the
		// build says the same thing.
		d.Score = progressScore
	case top == len(idx):
		d.Score = grow(0.93, strongStep, len(idx), thr, 1)
		d.Evidence.NoProgress = true
	case 2*top > len(idx):
		d.Score = grow(0.8, warnStep, len(idx), thr, warnCap)
	default:
		d.Score = grow(0.5, 0.04, len(idx), thr, 0.68)
	}
	d.Evidence.Threshold = thr
	d.Evidence.Error = evs[r].c.ErrorText()
	withOutcome(&d.Evidence, evs[r].c)
	return d, true
}
