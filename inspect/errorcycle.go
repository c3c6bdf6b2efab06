package inspect

import (
	"slices"
	"strings"
)

// error_cycle: the same error signature again and again.

// recentError returns the index of the latest error among the last three
// calls, -1 if none: a loop of errors is current only while errors keep
// coming, and ends when the call that failed has run again and passed
// (the test fixed after a loop of failing runs is no loop any more).
func (in *inspection) recentError(meaningful bool) int {
	for a := len(in.evs) - 1; a >= max(0, len(in.evs)-3); a-- {
		if in.evs[a].isErr && (!meaningful || in.evs[a].meaningful) {
			if in.passedSince(a) {
				return -1
			}
			return a
		}
	}
	return -1
}

// passedSince reports whether the call that failed at a ran again after
// it (the same call, or the same primary argument) and did not fail.
func (in *inspection) passedSince(a int) bool {
	e := &in.evs[a]
	for b := a + 1; b < len(in.evs); b++ {
		x := &in.evs[b]
		if x.has && !x.isErr && (x.fp == e.fp || e.c.PrimaryFingerprint != 0 && x.c.PrimaryFingerprint == e.c.PrimaryFingerprint) {
			return true
		}
	}
	return false
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
	streak := -1         // the errors at idx after the latest new attempt that succeeded
	for a := r; a >= in.win; a-- {
		x := &evs[a]
		if x.isErr && x.err == sig {
			idx = append(idx, a)
			targets = append(targets, x.c.known().target)
			continue
		}
		if x.has && !x.isErr {
			if in.failedBefore(x, idx, targets) {
				// The call that failed succeeded in between: the failure
				// that came back is a new attempt's, not the old loop.
				break
			}
			if streak < 0 && in.newAttempt(a) {
				// Something new succeeded in between: the errors before
				// it count for what was tried (attemptsDiffer), not for
				// the streak (goose restarts its error streak on a
				// success).
				streak = len(idx)
			}
		}
	}
	if streak < 0 {
		streak = len(idx)
	}
	thr := in.lim.errorCount
	if streak < thr {
		return Detection{}, false
	}
	slices.Reverse(idx)
	if in.changingObservation(idx) {
		return Detection{}, false
	}
	d := Detection{Score: grow(strongBase, strongStep, streak, thr, 1), Evidence: in.evidence(idx[len(idx)-streak:])}
	d.Evidence.Threshold, d.Evidence.NoProgress = thr, true
	if in.attemptsDiffer(idx) || in.syntaxErrorMoves(idx) {
		// Each failure came after a different change: debugging that has
		// not hit the cause yet, not a loop.
		d.Score, d.Evidence.NoProgress = progressScore, false
	}
	d.Evidence.Error = evs[r].c.ErrorText()
	d.Evidence.Element = shorten(evs[r].c.ErrorText(), 80)
	withOutcome(&d.Evidence, evs[r].c)
	return d, true
}

// newAttempt reports whether the call at a did something the window had
// not done yet, as goose restarts its error streak on a success: a change
// (it does not only look: a read between failures is no progress) that no
// earlier call of its tool made, bar a trivial variation (a number,
// whitespace). An edit whose arguments resemble an earlier one's yet
// change other text is a new change.
func (in *inspection) newAttempt(a int) bool {
	x := &in.evs[a]
	if x.c.onlyLooks() {
		return false
	}
	for b := in.win; b < a; b++ {
		y := &in.evs[b]
		if y.c.Name == x.c.Name && (y.fp == x.fp || trivialVariant(y.c.Args, x.c.Args)) {
			return false
		}
	}
	return true
}

// trivialVariant reports whether a and b differ only in digits and
// whitespace (`sleep 5` and `sleep 10`, a re-indented edit).
func trivialVariant(a, b string) bool {
	i, j := 0, 0
	for {
		for i < len(a) && (isDigit(a[i]) || asciiSpace[a[i]]) {
			i++
		}
		for j < len(b) && (isDigit(b[j]) || asciiSpace[b[j]]) {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if a[i] != b[j] {
			return false
		}
		i++
		j++
	}
}

// failedBefore reports whether x is a call that produced one of the
// errors at idx (whose targetHash are targets): the same call, or the
// same tool on the same target (`python a.py` after `python a.py -v`).
func (in *inspection) failedBefore(x *ev, idx []int, targets []uint64) bool {
	for i, a := range idx {
		e := &in.evs[a]
		if e.fp == x.fp || e.c.PrimaryFingerprint != 0 && e.c.PrimaryFingerprint == x.c.PrimaryFingerprint {
			return true
		}
		if e.c.Name == x.c.Name && targets[i] != 0 && x.c.known().target == targets[i] {
			return true
		}
	}
	return false
}

// syntaxErrorMoves reports a syntax error that comes back at another
// line of code that changed each time (the code is the call's argument,
// as in a notebook cell): the signature drops line numbers, yet a moving
// syntax error in new code is debugging progress (OpenHands' stuck tests).
func (in *inspection) syntaxErrorMoves(idx []int) bool {
	e := in.evs[idx[len(idx)-1]].c.ErrorText()
	if !namesSyntaxError(e) {
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
