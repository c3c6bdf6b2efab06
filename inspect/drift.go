package inspect

// param_drift: the same tool with arguments that barely change.

// paramDrift: the same tool called again and again with slightly changed
// arguments (or on the same primary target) that keeps failing or
// returning the same thing. Changing results (paginating, reading other
// parts of a file) are progress.
//
// The loop is current while its latest call is among the last
// driftReach calls: an agent that searches again and again with trivial
// variations reads other files between, and its request may end on one
// of those reads.
func (in *inspection) paramDrift() (Detection, bool) {
	evs := in.evs
	if len(evs) == 0 {
		return Detection{}, false
	}
	if d, ok := in.paramDriftAt(len(evs) - 1); ok {
		return d, true
	}
	last := evs[len(evs)-1].step
	for a := len(evs) - 2; a >= max(in.win, len(evs)-driftReach); a-- {
		// Only a search that found nothing or a call that failed anchors
		// an earlier loop: those are what is retried with variations. A
		// call of the latest turn is no earlier loop: the turn's calls
		// together are what repeats, which tool_cycle judges.
		if x := &evs[a]; x.step < last && x.has && (x.neg || x.isErr) {
			return in.paramDriftAt(a)
		}
	}
	return Detection{}, false
}

// driftReach is how many of the latest calls may hold the latest call of
// a drifting loop.
const driftReach = 3

// paramDriftAt is paramDrift for the loop whose latest call is evs[last]:
// the calls after it are left out.
func (in *inspection) paramDriftAt(last int) (Detection, bool) {
	evs := in.evs[:last+1]
	L := &evs[last]
	var idx []int
	fps := 0
	lt := L.c.known().target
	for a := in.win; a < len(evs); a++ {
		x := &evs[a]
		if x.c.Name != L.c.Name {
			continue
		}
		// Another file, however alike the arguments: the same tool at
		// other work, not a retry (asked first: it costs no comparison).
		if x.c.PrimaryFingerprint != L.c.PrimaryFingerprint {
			if t := x.c.known().target; t != lt && t != 0 && lt != 0 {
				continue
			}
		}
		if x.fp == L.fp || (L.c.PrimaryFingerprint != 0 && x.c.PrimaryFingerprint == L.c.PrimaryFingerprint) ||
			in.similar(x.c.Args, L.c.Args, in.lim.DriftSimilarity) {
			idx = append(idx, a)
			if x.fp != L.fp {
				fps++
			}
		}
	}
	thr := in.lim.DriftCount
	if len(idx) < thr || fps == 0 {
		return Detection{}, false
	}
	known, same, allErr := 0, true, true
	var ref, latest *ev
	for _, a := range idx {
		x := &evs[a]
		if !x.has {
			continue
		}
		known++
		latest = x
		if !x.isErr {
			allErr = false
		}
		if ref == nil {
			ref = x
		} else if same && !sameOutcome(ref, x) {
			same = false
		}
		if !same && !allErr {
			// Changing results that are not all failures: progress,
			// whatever the rest say. Their results need no hashing.
			return Detection{}, false
		}
	}
	var d Detection
	switch {
	case known > 0 && same && (ref.isErr || ref.neg || !ref.ack):
		d.Score = grow(strongBase, strongStep, len(idx), thr, 1)
		d.Evidence = in.evidence(idx)
		d.Evidence.NoProgress = true
		if known > 1 {
			// The outcome that came back, as the agent saw it last; one
			// result alone is no outcome repeated.
			withOutcome(&d.Evidence, latest.c)
		}
	case known > 0 && allErr && !L.look:
		d.Score = grow(0.8, warnStep, len(idx), thr, warnCap)
		d.Evidence = in.evidence(idx)
		d.Evidence.Error = ref.c.ErrorText()
	case known == 0:
		d.Score = grow(warnBase, warnStep, len(idx), thr, warnCap)
		d.Evidence = in.evidence(idx)
	default:
		return Detection{}, false
	}
	d.Evidence.Threshold = thr
	if L.c.Primary != "" {
		d.Evidence.Element = L.c.Name + "(" + shorten(collapseSpace(L.c.Primary), 40) + ", drifting args)"
	} else {
		d.Evidence.Element = L.c.Name + "(drifting args)"
	}
	return d, true
}
