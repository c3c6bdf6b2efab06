package inspect

// Signs of progress that keep repeated failures from counting as a loop.

// progressScore reports a repeat that the evidence calls progress: below
// any warning, even beside another such report.
const progressScore = 0.3

// changingObservation reports calls that only look (a log tail, a status,
// a listing) whose answers differ: new lines in a log that still shows
// an old error are news, not a loop.
func (in *inspection) changingObservation(idx []int) bool {
	for _, a := range idx {
		if !in.evs[a].look {
			return false
		}
	}
	ref := &in.evs[idx[0]]
	for _, a := range idx[1:] {
		if x := &in.evs[a]; x.has && ref.has && x.outcome() != ref.outcome() {
			return true
		}
	}
	return false
}

// attemptsDiffer reports whether something different was tried before
// each repeat of the failures at idx: every gap between two of them holds
// a call that changes things, unlike every call of the earlier gaps. The
// same edit again, a trivially varied one (a number, whitespace) or no
// change at all is no new attempt.
func (in *inspection) attemptsDiffer(idx []int) bool {
	evs := in.evs
	var gaps [][2]int // [from, to) event ranges between the failures
	for k := 1; k < len(idx); k++ {
		gaps = append(gaps, [2]int{idx[k-1] + 1, idx[k]})
	}
	for g, gap := range gaps {
		tried := false
		for a := gap[0]; a < gap[1]; a++ {
			x := &evs[a]
			if x.c.onlyLooks() || x.fp == evs[idx[0]].fp {
				continue
			}
			tried = true
			for _, prev := range gaps[:g] {
				for b := prev[0]; b < prev[1]; b++ {
					y := &evs[b]
					if y.c.Name == x.c.Name && (y.fp == x.fp || in.similar(y.c.Args, x.c.Args, in.lim.DriftSimilarity)) {
						return false
					}
				}
			}
		}
		if !tried {
			return false
		}
	}
	return len(gaps) > 0
}
