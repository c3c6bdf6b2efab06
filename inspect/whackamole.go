package inspect

import (
	"strings"
)

// whack_a_mole: two or more errors alternating.

// whackAMole: two or more errors taking turns (A,B,A,B or A,B,C,A,B,C):
// each fix brings the previous failure back.
func (in *inspection) whackAMole() (Detection, bool) {
	evs := in.evs
	r := in.recentError(true)
	if r < 0 {
		return Detection{}, false
	}
	// The window's meaningful errors, consecutive duplicates collapsed.
	var seq []uint64
	var at []int
	for a := in.win; a <= r; a++ {
		x := &evs[a]
		if !x.isErr || !x.meaningful {
			continue
		}
		if n := len(seq); n > 0 && seq[n-1] == x.err {
			at[n-1] = a
			continue
		}
		seq = append(seq, x.err)
		at = append(at, a)
	}
	for p := 2; p <= 3; p++ {
		m := 0
		for j := len(seq) - 1; j-p >= 0 && seq[j] == seq[j-p]; j-- {
			m++
		}
		cycles := (m + p) / p
		if cycles < in.lim.WhackCycles {
			continue
		}
		distinct := true
		for a := len(seq) - p; a < len(seq); a++ {
			for b := a + 1; b < len(seq); b++ {
				if seq[a] == seq[b] {
					distinct = false
				}
			}
		}
		// The errors take turns in the answers to one command (the test
		// run after each fix); errors of different calls taking turns are
		// a cycle of those calls.
		for j := len(seq) - cycles*p; j < len(seq); j++ {
			if evs[at[j]].fp != evs[at[len(seq)-1]].fp {
				distinct = false
			}
		}
		if !distinct {
			continue
		}
		var idx []int
		var errs []string
		for j := len(seq) - cycles*p; j < len(seq); j++ {
			idx = append(idx, at[j])
		}
		for j := len(seq) - p; j < len(seq); j++ {
			errs = append(errs, evs[at[j]].c.ErrorText())
		}
		d := Detection{Score: grow(strongBase, 0.03, cycles, in.lim.WhackCycles, 1), Evidence: in.evidence(idx)}
		d.Evidence.Count, d.Evidence.Threshold, d.Evidence.NoProgress = cycles, in.lim.WhackCycles, true
		d.Evidence.Error = strings.Join(errs, " | ")
		d.Evidence.Element = shorten(d.Evidence.Error, 100)
		return d, true
	}
	return Detection{}, false
}
