package inspect

import (
	"github.com/loopguard/loopguard/internal/rawjson"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

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
	withOutcome(&d.Evidence, evs[best].c)
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

// toolCycle: a sequence of 2..5 different calls repeating back to back
// (A,B,A,B or A,B,C,A,B,C). It reports at CycleRepeats occurrences with a
// low score (only a help to other rules) and fires on its own one
// occurrence later, strongly when every position's result is unchanged.
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
		if occ < in.lim.CycleRepeats {
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
		thr := in.lim.CycleRepeats
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
		noProgress := known > 0 && sameAll
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
		editCall(a.c) && targetHash(a.c.Primary) == targetHash(b.c.Primary)
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

// similarity is the Jaccard index of the word sets of a and b, blended
// with a character-level comparison for short strings where one changed
// character ("foo" vs "fo0") matters.
func (in *inspection) similarity(a, b string) float64 {
	if a == b {
		return 1
	}
	in.w.toks = wordHashes(in.w.toks[:0], a)
	in.w.toks2 = wordHashes(in.w.toks2[:0], b)
	j := jaccard(in.w.toks, in.w.toks2)
	if len(a) <= 64 && len(b) <= 64 {
		j = max(j, 1-float64(levenshtein(a, b))/float64(max(len(a), len(b))))
	}
	return j
}

// eachWordHash calls fn with the hash of each word of s, lower-cased, in
// order. Words are runs of word bytes and non-ASCII bytes.
func eachWordHash(s string, fn func(h uint64)) {
	for i := 0; i < len(s); {
		for i < len(s) && !isWordByte(s[i]) && s[i] < 0x80 {
			i++
		}
		j := i
		for j < len(s) && (isWordByte(s[j]) || s[j] >= 0x80) {
			j++
		}
		if j > i {
			fn(hashString(strings.ToLower(s[i:j])))
		}
		i = j
	}
}

// wordHashes appends the sorted, deduplicated hashes of the words of s.
func wordHashes(dst []uint64, s string) []uint64 {
	eachWordHash(s, func(h uint64) { dst = append(dst, h) })
	slices.Sort(dst)
	return slices.Compact(dst)
}

// bigramHashes appends the sorted hashes of consecutive word pairs.
func bigramHashes(dst []uint64, s string) []uint64 {
	var prev uint64
	have := false
	eachWordHash(s, func(h uint64) {
		if have {
			dst = append(dst, prev*31+h)
		}
		prev, have = h, true
	})
	slices.Sort(dst)
	return slices.Compact(dst)
}

func jaccard(a, b []uint64) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 1
	}
	i, j, inter := 0, 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			inter++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// levenshtein is the edit distance of a and b (bytes), for len(a) <= 64,
// with Myers' bit-vector algorithm in Hyyrö's formulation: one column of
// the distance matrix per byte of b, held in two 64-bit words, instead of
// len(a)*len(b) cells. paramDrift compares every windowed call's
// arguments with the latest.
func levenshtein(a, b string) int {
	m := len(a)
	if m == 0 {
		return len(b)
	}
	var peq [256]uint64 // bit i set in peq[c]: a[i] == c
	for i := 0; i < m; i++ {
		peq[a[i]] |= 1 << i
	}
	pv, mv := ^uint64(0), uint64(0) // vertical +1 / -1 deltas
	last := uint64(1) << (m - 1)
	d := m
	for j := 0; j < len(b); j++ {
		eq := peq[b[j]]
		xv := eq | mv
		xh := ((eq & pv) + pv) ^ pv | eq
		ph := mv | ^(xh | pv)
		mh := pv & xh
		if ph&last != 0 {
			d++
		} else if mh&last != 0 {
			d--
		}
		ph = ph<<1 | 1 // row 0 grows by one per column
		mh <<= 1
		pv = mh | ^(xv | ph)
		mv = ph & xv
	}
	return d
}

// paramDrift: the same tool called again and again with slightly changed
// arguments (or on the same primary target) that keeps failing or
// returning the same thing. Changing results (paginating, reading other
// parts of a file) are progress.
func (in *inspection) paramDrift() (Detection, bool) {
	evs := in.evs
	if len(evs) == 0 {
		return Detection{}, false
	}
	L := &evs[len(evs)-1]
	var idx []int
	fps := 0
	lt, ltKnown := uint64(0), false
	for a := in.win; a < len(evs); a++ {
		x := &evs[a]
		if x.c.Name != L.c.Name {
			continue
		}
		if x.fp == L.fp || (L.c.PrimaryFingerprint != 0 && x.c.PrimaryFingerprint == L.c.PrimaryFingerprint) ||
			in.similarity(x.c.Args, L.c.Args) >= in.lim.DriftSimilarity {
			if x.c.PrimaryFingerprint != L.c.PrimaryFingerprint {
				if !ltKnown {
					lt, ltKnown = targetHash(L.c.Primary), true
				}
				if t := targetHash(x.c.Primary); t != lt && t != 0 && lt != 0 {
					continue // another file: the same tool at other work, not a retry
				}
			}
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
	var ref *ev
	for _, a := range idx {
		x := &evs[a]
		if !x.has {
			continue
		}
		known++
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
		withOutcome(&d.Evidence, ref.c)
	case known > 0 && allErr && !L.look:
		d.Score = grow(0.8, warnStep, len(idx), thr, warnCap)
		d.Evidence = in.evidence(idx)
		d.Evidence.Error = ref.c.ErrorText
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

// recentError returns the index of the latest error among the last three
// calls, -1 if none: a loop of errors is current only while errors keep
// coming.
func (in *inspection) recentError(meaningful bool) int {
	for a := len(in.evs) - 1; a >= max(0, len(in.evs)-3); a-- {
		if in.evs[a].isErr && (!meaningful || in.evs[a].meaningful) {
			return a
		}
	}
	return -1
}

// errorCycle: the same error signature (type + normalised message) again
// and again in the window, whatever call produced it.
func (in *inspection) errorCycle() (Detection, bool) {
	evs := in.evs
	r := in.recentError(true)
	if r < 0 {
		return Detection{}, false
	}
	sig := evs[r].err
	var idx []int
	var targets []uint64 // of the calls at idx
	for a := r; a >= in.win; a-- {
		x := &evs[a]
		if x.isErr && x.err == sig {
			idx = append(idx, a)
			targets = append(targets, targetHash(x.c.Primary))
			continue
		}
		if x.has && !x.isErr && in.failedBefore(x, idx, targets) {
			// The call that failed succeeded in between: the failure
			// that came back is a new attempt's, not the old loop.
			break
		}
	}
	thr := in.lim.errorCount
	if len(idx) < thr {
		return Detection{}, false
	}
	slices.Reverse(idx)
	if in.changingObservation(idx) {
		return Detection{}, false
	}
	d := Detection{Score: grow(strongBase, strongStep, len(idx), thr, 1), Evidence: in.evidence(idx)}
	d.Evidence.Threshold, d.Evidence.NoProgress = thr, true
	if in.attemptsDiffer(idx) || in.syntaxErrorMoves(idx) {
		// Each failure came after a different change: debugging that has
		// not hit the cause yet, not a loop.
		d.Score, d.Evidence.NoProgress = progressScore, false
	}
	d.Evidence.Error = evs[r].c.ErrorText
	d.Evidence.Element = shorten(evs[r].c.ErrorText, 80)
	withOutcome(&d.Evidence, evs[r].c)
	return d, true
}

// failedBefore reports whether x is a call that produced one of the
// errors at idx (whose targetHash are targets): the same call, or the
// same tool on the same target (`python a.py` after `python a.py -v`).
func (in *inspection) failedBefore(x *ev, idx []int, targets []uint64) bool {
	t, known := uint64(0), false
	for i, a := range idx {
		e := &in.evs[a]
		if e.fp == x.fp || e.c.PrimaryFingerprint != 0 && e.c.PrimaryFingerprint == x.c.PrimaryFingerprint {
			return true
		}
		if e.c.Name == x.c.Name && targets[i] != 0 {
			if !known {
				t, known = targetHash(x.c.Primary), true
			}
			if t == targets[i] {
				return true
			}
		}
	}
	return false
}

// syntaxErrorMoves reports a syntax error that comes back at another
// line of code that changed each time (the code is the call's argument,
// as in a notebook cell): the signature drops line numbers, yet a moving
// syntax error in new code is debugging progress (OpenHands' stuck tests).
func (in *inspection) syntaxErrorMoves(idx []int) bool {
	e := in.evs[idx[len(idx)-1]].c.ErrorText
	if !strings.Contains(e, "SyntaxError") && !strings.Contains(e, "IndentationError") && !strings.Contains(e, "syntax error") {
		return false
	}
	lines := make([]string, 0, len(idx))
	for i, a := range idx {
		x := &in.evs[a]
		for _, b := range idx[:i] {
			if in.evs[b].fp == x.fp {
				return false // the same code failing again
			}
		}
		lines = append(lines, errorLocation(x.c.Result))
	}
	for _, l := range lines[1:] {
		if l != lines[0] {
			return true
		}
	}
	return false
}

// errorLocation returns the number after the last "line " of an error
// output: where the failure is.
func errorLocation(res string) string {
	if len(res) > 4096 {
		res = res[len(res)-4096:]
	}
	for rest := res; ; {
		i := strings.LastIndex(rest, "line ")
		if i < 0 {
			return ""
		}
		j := i + len("line ")
		k := j
		for k < len(rest) && isDigit(rest[k]) {
			k++
		}
		if k > j {
			return rest[j:k]
		}
		rest = rest[:i]
	}
}

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
			if readOnly(x.c) || x.fp == evs[idx[0]].fp {
				continue
			}
			tried = true
			for _, prev := range gaps[:g] {
				for b := prev[0]; b < prev[1]; b++ {
					y := &evs[b]
					if y.c.Name == x.c.Name && (y.fp == x.fp || in.similarity(y.c.Args, x.c.Args) >= in.lim.DriftSimilarity) {
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
			errs = append(errs, evs[at[j]].c.ErrorText)
		}
		d := Detection{Score: grow(strongBase, 0.03, cycles, in.lim.WhackCycles, 1), Evidence: in.evidence(idx)}
		d.Evidence.Count, d.Evidence.Threshold, d.Evidence.NoProgress = cycles, in.lim.WhackCycles, true
		d.Evidence.Error = strings.Join(errs, " | ")
		d.Evidence.Element = shorten(d.Evidence.Error, 100)
		return d, true
	}
	return Detection{}, false
}

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
	d.Evidence.Error = evs[r].c.ErrorText
	withOutcome(&d.Evidence, evs[r].c)
	return d, true
}

// editPairs are the (old, new) argument names of replace-style edit tools.
var editPairs = [...][2]string{
	{"old_str", "new_str"}, {"old_string", "new_string"}, {"oldText", "newText"}, {"old_text", "new_text"},
	{"search", "replace"}, {"old", "new"}, {"find", "replace"},
}

var pathKeys = [...]string{"path", "file_path", "filePath", "target_file", "filename", "file", "absolute_path"}
var contentKeys = [...]string{"content", "file_text", "contents", "text", "code"}

// editKeys are the argument names editUndo reads, each once.
var editKeys = func() map[string]int {
	m := map[string]int{}
	add := func(k string) {
		if _, ok := m[k]; !ok {
			m[k] = len(m)
		}
	}
	for _, k := range pathKeys {
		add(k)
	}
	for _, kp := range editPairs {
		add(kp[0])
		add(kp[1])
	}
	for _, k := range contentKeys {
		add(k)
	}
	return m
}()

// editFields holds the raw values of editKeys in one arguments object,
// read in one pass: the first member of each name, as gjson.Get (which
// this replaced) finds it.
type editFields struct{ vals [32]string }

func (f *editFields) read(args string) {
	eachMember(args, func(k, v string) bool {
		if i, ok := editKeys[jsonString(k)]; ok && f.vals[i] == "" {
			f.vals[i] = v
		}
		return true
	})
}

func (f *editFields) get(k string) string { return f.vals[editKeys[k]] }

// jsonString returns the value of a raw JSON string: a view when it has
// no escapes, else unescaped as gjson does it (a rare case).
func jsonString(raw string) string {
	if len(raw) < 2 {
		return ""
	}
	if body := raw[1 : len(raw)-1]; strings.IndexByte(body, '\\') < 0 {
		return body
	}
	return gjson.Parse(raw).Str
}

// hashJSONString hashes the value of a raw JSON string without allocating
// in the common case. Escapes other than \u decode the same in
// appendUnescaped and gjson; \u escapes (lone surrogates differ) go to gjson.
func (in *inspection) hashJSONString(raw string) uint64 {
	body := raw[1 : len(raw)-1]
	if strings.IndexByte(body, '\\') < 0 {
		return hashString(body)
	}
	if strings.Contains(body, `\u`) {
		return hashString(gjson.Parse(raw).Str)
	}
	in.w.tmp = rawjson.AppendUnescaped(in.w.tmp[:0], body)
	return uint64(newFNV().bytes(in.w.tmp))
}

type edit struct {
	a        int // event index
	path     string
	old, new uint64 // for replace edits
	content  uint64 // for whole-file writes
}

// editUndo: an edit that swaps back an earlier edit of the same file (old
// and new exchanged), or a file's written content going back to an
// earlier version. One revert is common (removing a debug print) and only
// reported; the change applied again after its revert is a loop.
func (in *inspection) editUndo() (Detection, bool) {
	evs := in.evs
	var edits []edit
	open := "" // the file SWE-agent's editor has open: its edit names none
	for a := range evs {
		x := &evs[a]
		if x.isErr || !strings.Contains(x.c.Args, `"`) {
			continue
		}
		if x.c.Name == "open" && x.c.Primary != "" {
			open = x.c.Primary
			continue
		}
		if strings.Contains(x.c.Args, patchFile) {
			edits = appendPatchEdits(edits, a, x.c)
			continue
		}
		// Every pathKeys name spells "path" or "file", unless escaped.
		if open == "" && !strings.Contains(x.c.Args, "path") && !strings.Contains(x.c.Args, "file") && strings.IndexByte(x.c.Args, '\\') < 0 {
			continue
		}
		if rawKind(x.c.Args) != '{' || !rawjson.Valid(rawjson.Bytes(x.c.Args)) {
			continue
		}
		var f editFields
		f.read(x.c.Args)
		path := open
		for _, k := range pathKeys {
			if v := f.get(k); rawKind(v) == '"' {
				path = jsonString(v)
				break
			}
		}
		if path == "" {
			continue
		}
		e := edit{a: a, path: path}
		for _, kp := range editPairs {
			o, n := f.get(kp[0]), f.get(kp[1])
			if rawKind(o) == '"' && rawKind(n) == '"' {
				e.old, e.new = in.hashJSONString(o)|1, in.hashJSONString(n)|1
				break
			}
		}
		if e.old == 0 {
			for _, k := range contentKeys {
				if v := f.get(k); rawKind(v) == '"' {
					e.content = in.hashJSONString(v) | 1
					break
				}
			}
			if e.content == 0 {
				continue
			}
		}
		edits = append(edits, e)
	}
	// Count reverts per file: each edit that swaps back an earlier edit of
	// its file counts once, so A->B, B->A, A->B is two reverts (the revert
	// repeated), however many times each direction occurred before.
	bestPath, best, bestIdx := "", 0, []int(nil)
	swaps := map[string]int{}
	swapIdx := map[string][]int{}
	for j := range edits {
		ej := &edits[j]
		reverts := 0
		var idx []int
		for i := j - 1; i >= 0 && ej.old != 0; i-- {
			ei := &edits[i]
			if ei.path == ej.path && ej.old == ei.new && ej.new == ei.old {
				swaps[ej.path]++
				swapIdx[ej.path] = append(swapIdx[ej.path], ei.a, ej.a)
				reverts = swaps[ej.path]
				idx = append(idx, swapIdx[ej.path]...)
				break
			}
		}
		if ej.content != 0 {
			// content history of this file up to j: A,B,A counts each return
			var seen []uint64
			for i := 0; i <= j; i++ {
				ei := &edits[i]
				if ei.path != ej.path || ei.content == 0 {
					continue
				}
				if n := len(seen); n > 0 && seen[n-1] != ei.content && slices.Contains(seen[:n-1], ei.content) {
					reverts++
				}
				seen = append(seen, ei.content)
				idx = append(idx, ei.a)
			}
		}
		if reverts > best {
			idx = append(idx, ej.a)
			slices.Sort(idx)
			best, bestPath, bestIdx = reverts, ej.path, slices.Compact(idx)
		}
	}
	var d Detection
	thr := in.lim.EditUndoCount
	if best >= thr {
		d.Evidence = in.evidence(bestIdx)
		if best > thr {
			d.Score = grow(0.93, strongStep, best, thr+1, 1)
			d.Evidence.NoProgress = true
		} else {
			d.Score = 0.5
		}
		d.Evidence.Count, d.Evidence.Threshold = best, thr
		d.Evidence.Element = evs[bestIdx[len(bestIdx)-1]].c.Name + "(" + shorten(bestPath, 40) + ") reverted"
	}
	if idx, noProgress := in.stateReturns(); len(idx) >= in.lim.StateReturns {
		// Returning to one state again and again is a loop whatever the
		// attempts were; attempts that all failed alike make it certain.
		r := Detection{Score: 0.8, Evidence: in.evidence(idx)}
		if noProgress {
			r.Score = grow(0.93, strongStep, len(idx), in.lim.StateReturns, 1)
		}
		r.Evidence.Threshold, r.Evidence.NoProgress = in.lim.StateReturns, noProgress
		r.Evidence.Element += " restored"
		withOutcome(&r.Evidence, evs[idx[len(idx)-1]].c)
		if r.Score > d.Score {
			d = r
		}
	}
	return d, d.Score > 0
}

// patchFile starts a file's section in an apply_patch patch (Codex).
const patchFile = "*** Update File: "

// appendPatchEdits reads the files an apply_patch call changes as
// replace edits: the removed lines are old, the added lines new, so a
// patch that puts back what an earlier one took out is a revert.
func appendPatchEdits(dst []edit, a int, c *Call) []edit {
	patch := gjson.Get(c.Args, "input").Str
	if patch == "" {
		patch = c.Primary // ["apply_patch", "*** Begin Patch ..."]
	}
	var e *edit
	var removed, added fnv
	flush := func() {
		if e != nil {
			e.old, e.new = uint64(removed)|1, uint64(added)|1
		}
		e = nil
	}
	for _, line := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(line, patchFile):
			flush()
			dst = append(dst, edit{a: a, path: strings.TrimSpace(line[len(patchFile):])})
			e, removed, added = &dst[len(dst)-1], newFNV(), newFNV()
		case strings.HasPrefix(line, "*** "):
			flush()
		case e == nil:
		case strings.HasPrefix(line, "-"):
			removed = removed.str(line[1:]).byte('\n')
		case strings.HasPrefix(line, "+"):
			added = added.str(line[1:]).byte('\n')
		}
	}
	flush()
	return dst
}

// textStep is an assistant text the text rules compare.
type textStep struct {
	step int
	text string
}

// minWords keeps short answers ("Done.", "OK, continuing.") out of the text
// rules: they legitimately repeat.
const minWords = 8

func wordCount(s string) int {
	n, in := 0, false
	for i := 0; i < len(s); i++ {
		sp := s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'
		if !sp && !in {
			n++
		}
		in = !sp
	}
	return n
}

// outputRepetition: assistant text that nearly repeats recent assistant
// text. Narration beside tool calls is left to the tool rules unless it is
// long: "Let me run the tests again" is not a loop by itself.
func (in *inspection) outputRepetition() (Detection, bool) {
	t := in.t
	start := max(0, min(t.Start, len(t.Steps)))
	var texts []textStep
	for s := len(t.Steps) - 1; s >= start && len(texts) < 6; s-- {
		st := &t.Steps[s]
		txt := strings.TrimSpace(st.Text)
		wc := wordCount(txt)
		if wc < minWords || (len(st.Calls) > 0 && wc < 40) {
			if len(texts) == 0 && s < len(t.Steps)-2 {
				return Detection{}, false // the latest texts are not recent: nothing current
			}
			continue
		}
		texts = append(texts, textStep{s, txt})
	}
	if len(texts) < 2 {
		return Detection{}, false
	}
	last := texts[0]
	var idxSteps []int
	simLast := in.textSimilarity(last.text, texts[1].text)
	near := 0
	for _, o := range texts[1:] {
		if in.textSimilarity(last.text, o.text) >= in.lim.OutputSimilar2 {
			near++
			idxSteps = append(idxSteps, o.step)
		}
	}
	var score float64
	count := near + 1
	switch {
	case near >= 2:
		score = grow(strongBase, strongStep, count, 3, 1)
	case simLast >= in.lim.OutputSimilarLast:
		score = 0.8
	default:
		return Detection{}, false
	}
	idxSteps = append(idxSteps, last.step)
	slices.Sort(idxSteps)
	d := Detection{Score: score}
	d.Evidence = textEvidence(last.text, idxSteps, 2)
	d.Evidence.NoProgress = near >= 2
	return d, true
}

func textEvidence(text string, steps []int, thr int) Evidence {
	return Evidence{
		Element:   `"` + shorten(collapseSpace(text), 60) + `"`,
		Result:    shorten(collapseSpace(text), 300),
		Count:     len(steps),
		Threshold: thr,
		First:     steps[0],
		Last:      steps[len(steps)-1],
		Steps:     steps,
	}
}

// textSimilarity blends word-set and word-bigram Jaccard: word sets alone
// call a shuffled text a copy, bigrams alone punish one changed word.
func (in *inspection) textSimilarity(a, b string) float64 {
	if a == b {
		return 1
	}
	in.w.toks = wordHashes(in.w.toks[:0], a)
	in.w.toks2 = wordHashes(in.w.toks2[:0], b)
	w := jaccard(in.w.toks, in.w.toks2)
	in.w.toks = bigramHashes(in.w.toks[:0], a)
	in.w.toks2 = bigramHashes(in.w.toks2[:0], b)
	return (w + jaccard(in.w.toks, in.w.toks2)) / 2
}

// summaryLoop: in a session that uses tools, the latest assistant turns
// carry only text (summaries, plans, "I will now...") with no tool call:
// the agent talks instead of working.
func (in *inspection) summaryLoop() (Detection, bool) {
	if d, ok := in.failedTurns(); ok {
		return d, true
	}
	t := in.t
	usesTools := false
	for s := range t.Steps {
		if len(t.Steps[s].Calls) > 0 {
			usesTools = true
			break
		}
	}
	if !usesTools {
		return Detection{}, false
	}
	start := max(0, min(t.Start, len(t.Steps)))
	var steps []int
	for s := len(t.Steps) - 1; s >= start && len(t.Steps[s].Calls) == 0; s-- {
		steps = append(steps, s)
	}
	thr := in.lim.SummaryCount
	if len(steps) < thr {
		return Detection{}, false
	}
	slices.Reverse(steps)
	// Are the texts saying the same thing?
	simSum, pairs := 0.0, 0
	for i := 1; i < len(steps); i++ {
		simSum += in.textSimilarity(t.Steps[steps[i]].Text, t.Steps[steps[i-1]].Text)
		pairs++
	}
	d := Detection{}
	lastText := strings.TrimSpace(t.Steps[steps[len(steps)-1]].Text)
	d.Evidence = textEvidence(lastText, steps, thr)
	if lastText == "" {
		d.Evidence.Element = "(empty reply)"
	}
	if simSum/float64(pairs) >= 0.5 {
		d.Score = grow(strongBase, strongStep, len(steps), thr, 1)
		d.Evidence.NoProgress = true
	} else {
		d.Score = grow(warnBase, warnStep, len(steps), thr, warnCap)
	}
	return d, true
}

// failedTurns: the assistant's own turns fail the same way again and
// again: an empty answer, or a provider or context-length error written
// as the answer. A human asking again does not end it (the model fails
// whatever it is asked), so the run may cross Trajectory.Start.
func (in *inspection) failedTurns() (Detection, bool) {
	t := in.t
	var steps []int
	var sig uint64
	line := ""
	for s := len(t.Steps) - 1; s >= 0 && len(t.Steps[s].Calls) == 0; s-- {
		l, h := in.turnFailure(t.Steps[s].Text)
		if h == 0 || sig != 0 && h != sig {
			break
		}
		if sig == 0 {
			sig, line = h, l
		}
		steps = append(steps, s)
	}
	thr := in.lim.SummaryCount
	if len(steps) < thr {
		return Detection{}, false
	}
	slices.Reverse(steps)
	d := Detection{Score: grow(strongBase, strongStep, len(steps), thr, 1)}
	d.Evidence = textEvidence(line, steps, thr)
	d.Evidence.NoProgress = true
	if line == "" {
		d.Evidence.Element = "(empty reply)"
	} else {
		d.Evidence.Error = line
	}
	return d, true
}

// providerErrors are phrases of the errors LLM servers and their client
// libraries return, which some agents write into the conversation as the
// assistant's answer.
var providerErrors = [...]string{
	"context length", "context_length", "context window", "maximum context", "too many tokens", "prompt is too long",
	"rate limit", "rate_limit", "ratelimit", "too many requests", "overloaded", "internal server error",
	"bad gateway", "service unavailable", "gateway timeout", "request timed out", "apierror", "api error",
	"apiconnectionerror", "invalid_request_error", "badrequesterror", "error code:", "litellm.", "quota",
}

// turnFailure returns the normalised failure an assistant text reports
// and its hash: ("", hash) for an empty answer, (_, 0) when the text is
// an answer.
func (in *inspection) turnFailure(text string) (string, uint64) {
	text = strings.TrimSpace(text)
	if text == "" {
		return "", hashString("\x00empty")
	}
	if len(text) > 1000 {
		return "", 0 // provider errors are short
	}
	first, _, _ := strings.Cut(text, "\n")
	lower := strings.ToLower(text)
	known := false
	for _, p := range providerErrors {
		if strings.Contains(lower, p) {
			known = true
			break
		}
	}
	if !known {
		return "", 0
	}
	in.w.tmp, in.w.tmp2 = appendErrorSig(in.w.tmp[:0], in.w.tmp2, shorten(first, 240))
	return string(in.w.tmp), hashString(string(in.w.tmp)) | 1
}
