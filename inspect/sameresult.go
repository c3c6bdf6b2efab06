package inspect

import (
	"slices"
)

// same_result: varied calls that all come back with the same failure or empty result.

// sameResult: calls of one tool with different arguments that all come
// back with the same failure or the same empty / "not found" answer.
// Short successful acknowledgements never count.
func (in *inspection) sameResult() (Detection, bool) {
	evs := in.evs
	if len(evs) == 0 {
		return Detection{}, false
	}
	L := &evs[len(evs)-1]
	if !L.has || !(L.neg || L.isErr) {
		return Detection{}, false
	}
	var idx []int
	fps := map[uint64]bool{}
	for a := len(evs) - 1; a >= in.win; a-- {
		x := &evs[a]
		if x.c.Name != L.c.Name {
			if x.has && !x.isErr && in.newAttempt(a) {
				// Something new succeeded in between: the answers before
				// it were another attempt's (goose restarts its streak on
				// a success).
				break
			}
			continue
		}
		if !x.has || !(x.neg || x.isErr) || !(x.outcome() == L.outcome() || x.isErr && L.isErr && x.err == L.err && (L.meaningful || L.neg)) {
			break
		}
		idx = append(idx, a)
		fps[x.fp] = true
	}
	thr := in.lim.SameResultCount
	if len(idx) < thr || len(fps) < 2 {
		return Detection{}, false
	}
	slices.Reverse(idx)
	if L.isErr && in.syntaxErrorMoves(idx) {
		return Detection{}, false
	}
	// Similar arguments (foo, fo0, f00) are a stuck search; unrelated
	// arguments all missing is exploration and needs more repeats.
	sim := 0.0
	for _, a := range idx[:len(idx)-1] {
		sim += in.similarity(evs[a].c.Args, L.c.Args)
	}
	sim /= float64(len(idx) - 1)
	d := Detection{Evidence: in.evidence(idx)}
	if sim >= 0.6 {
		d.Score = grow(strongBase, strongStep, len(idx), thr, 1)
	} else {
		d.Score = grow(0.72, 0.06, len(idx), thr, 0.96)
	}
	d.Evidence.Threshold, d.Evidence.NoProgress = thr, true
	d.Evidence.Element = L.c.Name + "(varying args) -> same result"
	withOutcome(&d.Evidence, L.c)
	return d, true
}
