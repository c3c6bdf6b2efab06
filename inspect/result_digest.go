package inspect

import (
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// A digest of a tool result is everything the detectors read of it,
// kept by the session cache instead of the result's text: tool output is
// most of a history, and a cached session would otherwise hold a copy of
// it. Each part is what a rule computes from Call.Result, computed once:
// the fingerprint (in Call.resultFP), these facts (Call.resultFacts) and
// the evidence text (Call.digest, while a rule may report it).
const (
	resultDigested uint8 = 1 << iota // Result was dropped: the digest stands for it
	resultNegative                   // negativeResult
	resultAck                        // isAck
	resultLines                      // the output's first 2 KiB show 3 lines or more (a looking call's content)
)

// resultDigest is the evidence text of a digested result.
type resultDigest struct {
	evidence string // the Evidence.Result withOutcome reports for the call
}

// digested reports whether c's result text was dropped for its digest.
func (c *Call) digested() bool { return c.resultFacts&resultDigested != 0 }

// digestResult replaces c's result text by its digest. A result some rule
// reads beyond the digest keeps its text (see keepsResult).
func digestResult(c *Call) {
	if !c.HasResult || c.digested() || keepsResult(c) {
		return
	}
	f := resultDigested
	if negativeResult(c.Result) {
		f |= resultNegative
	}
	if isAck(c.Result) {
		f |= resultAck
	}
	if showsLines(outputText(c.Result)) {
		f |= resultLines
	}
	d := &resultDigest{}
	// One normalisation serves the fingerprint and the evidence when the
	// text is no longer than what the evidence normalises (normalizedText).
	rt := resultText(c.Result)
	withNormalized(rt, func(b []byte) {
		atomic.StoreUint64(&c.resultFP, normalizedHash(b))
		if len(rt) <= maxNormalizedText {
			var ev [2*maxOutcome + 6]byte
			d.evidence = string(appendShortCollapsed(ev[:0], unsafe.String(unsafe.SliceData(b), len(b)), maxOutcome))
		}
	})
	if len(rt) > maxNormalizedText {
		d.evidence = outcomeText(c.Result)
	}
	c.setExtra(c.argEdit(), d, c.fail())
	c.resultFacts = f
	c.Result = ""
}

// dropDigest drops the evidence text of c's digest, and returns the
// memory freed.
func (c *Call) dropDigest() int {
	d := c.digest()
	if d == nil {
		return 0
	}
	c.setExtra(c.argEdit(), nil, c.fail())
	if c.extra == nil {
		return d.size() + extraSize
	}
	return d.size()
}

// extraSize is the memory of a callExtra.
const extraSize = int(unsafe.Sizeof(callExtra{}))

// size is the memory d holds; 0 for nil.
func (d *resultDigest) size() int {
	if d == nil {
		return 0
	}
	return int(unsafe.Sizeof(*d)) + len(d.evidence)
}

// keepsResult reports a result whose text a rule reads beyond the digest:
// the error locations of syntax errors (inspection.syntaxErrorMoves).
func keepsResult(c *Call) bool {
	return c.IsError && namesSyntaxError(c.ErrorText())
}

// namesSyntaxError reports an error text that names a syntax error.
func namesSyntaxError(e string) bool {
	return strings.Contains(e, "SyntaxError") || strings.Contains(e, "IndentationError") || strings.Contains(e, "syntax error")
}

// showsLines reports output whose first 2 KiB hold 3 lines or more.
func showsLines(out string) bool {
	return strings.Count(out[:min(len(out), 2048)], "\n") >= 3
}

// negativeResult, isAck and showsLines of the call's result, from its
// digest when the text was dropped.
func (c *Call) negativeResult() bool {
	if c.digested() {
		return c.resultFacts&resultNegative != 0
	}
	return negativeResult(c.Result)
}

func (c *Call) isAck() bool {
	if c.digested() {
		return c.resultFacts&resultAck != 0
	}
	return isAck(c.Result)
}

func (c *Call) showsLines() bool {
	if c.digested() {
		return c.resultFacts&resultLines != 0
	}
	return showsLines(outputText(c.Result))
}

// outcome is the result as Evidence.Result reports it; "" for a digest
// whose evidence text was dropped, which no rule reports (evidenceZone).
func (c *Call) outcome() string {
	if c.digested() {
		if d := c.digest(); d != nil {
			return d.evidence
		}
		return ""
	}
	return outcomeText(c.Result)
}

func outcomeText(res string) string {
	return string(appendShortCollapsed(nil, normalizedText(resultText(res)), maxOutcome))
}

// maxOutcome is the length of Evidence.Result.
const maxOutcome = 300

// appendShortCollapsed appends shorten(collapseSpace(s), n), reading s only
// as far as the first n+1 bytes of the collapsed text: a tool's output is
// long, and the evidence shows its beginning. It appends at most 2n+6
// bytes.
func appendShortCollapsed(dst []byte, s string, n int) []byte {
	m := len(dst)
	// collapseSpace's test, a line break first: output has one early,
	// and a long text without one is read to its end.
	if !strings.ContainsAny(s, "\t\r\n") && !strings.Contains(s, "  ") {
		// collapseSpace leaves it as it is.
		return shortenAt(append(dst, s[:min(len(s), n+1)]...), m, n)
	}
	// strings.Join(strings.Fields(s), " ") up to n+1 bytes.
	space := false // a space is due before the next field
	for i := 0; i < len(s) && len(dst)-m <= n; {
		// A run of ASCII bytes that are no space, else one rune.
		end, isSpace := i, false
		for end < len(s) && s[end] < utf8.RuneSelf && !asciiSpace[s[end]] && end-i <= n {
			end++
		}
		switch {
		case end > i:
		case asciiSpace[s[i]]:
			// A run of ASCII spaces, the line breaks and indents of
			// output, taken whole.
			for end++; end < len(s) && asciiSpace[s[end]]; end++ {
			}
			isSpace = true
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			end, isSpace = i+size, unicode.IsSpace(r)
		}
		switch {
		case isSpace:
			space = len(dst) > m
		case space:
			dst = append(append(dst, ' '), s[i:end]...)
			space = false
		default:
			dst = append(dst, s[i:end]...)
		}
		i = end
	}
	return shortenAt(dst, m, n)
}

// shortenAt is shorten of the text dst[m:], in place.
func shortenAt(dst []byte, m, n int) []byte {
	t := dst[m:]
	if len(t) <= n {
		return dst
	}
	cut := n - len("…")
	for cut > 0 && cut < len(t) && t[cut]&0xC0 == 0x80 {
		cut--
	}
	return append(dst[:m+cut], "…"...)
}

// asciiSpace marks the ASCII bytes unicode.IsSpace reports.
var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// evidenceZone is where in a trajectory the calls are whose result a rule
// may report (Evidence.Result, see withOutcome), in it or in any longer
// history that extends it: the session cache drops the evidence text of
// the others' digests, about 300 bytes a call. Rule by rule:
//
//   - tool_cycle, same_result, tool_repetition's run (L), error_cycle and
//     test_fix_cycle (recentError) report one of the last three calls;
//   - tool_repetition's run reports its latest call with a result, all
//     calls after it having none: the latest call with a result;
//   - tool_repetition in the window and param_drift report the latest
//     call with a result of a group in the last Window steps that has an
//     earlier one of the same tool and the same outcome (the same result,
//     or the same error): a call that repeats an earlier one in the window;
//   - edit_undo's state returns report a restoring call (primaryRestores).
//
// Each is a call the detectors count (not ignored). As a history grows a
// call only leaves the zone: new calls become the last ones and the
// latest answered, the window moves on past the calls a call repeats,
// and a call repeats no earlier call it did not repeat before (an earlier
// call with no result yet counts as one it repeats; a call answered later
// is digested then, in the zone).
type evidenceZone struct {
	t        *Trajectory
	window   int       // the first step of the last Window steps
	recent   [3]callAt // the last three counted calls, latest first
	answered callAt    // the latest counted call with a result
}

// callAt is call k of step s; the zero callAt{-1, -1} names none.
type callAt struct{ s, k int }

var noCall = callAt{-1, -1}

func (e *Engine) evidenceZone(t *Trajectory) evidenceZone {
	z := evidenceZone{t: t, window: len(t.Steps) - e.cfg.Window, recent: [3]callAt{noCall, noCall, noCall}, answered: noCall}
	n := 0
	for s := len(t.Steps) - 1; s >= 0 && (n < len(z.recent) || z.answered == noCall); s-- {
		calls := t.Steps[s].Calls
		for k := len(calls) - 1; k >= 0; k-- {
			c := &calls[k]
			if e.ignored(c.Name) {
				continue
			}
			if n < len(z.recent) {
				z.recent[n] = callAt{s, k}
				n++
			}
			if c.HasResult && z.answered == noCall {
				z.answered = callAt{s, k}
			}
		}
	}
	return z
}

// reports reports whether a rule may report the result of call k of step
// s, c.
func (z *evidenceZone) reports(s, k int, c *Call) bool {
	at := callAt{s, k}
	return at == z.answered || at == z.recent[0] || at == z.recent[1] || at == z.recent[2] ||
		c.facts()&primaryRestores != 0 || s >= z.window && z.repeats(s, k, c)
}

// repeats reports whether call k of step s, c, may have the same outcome
// as an earlier call of its tool in the window (sameOutcome): the same
// result fingerprint, an error with the same signature, or an earlier
// call with no result yet (its result may come later). An engine with
// error patterns, which make other errors the same, keeps every result
// (see ParseSession).
func (z *evidenceZone) repeats(s, k int, c *Call) bool {
	res := c.ResultFingerprint() | 1
	for r := max(z.window, 0); r <= s; r++ {
		calls := z.t.Steps[r].Calls
		if r == s {
			calls = calls[:k]
		}
		for j := range calls {
			y := &calls[j]
			if y.Name != c.Name {
				continue
			}
			if !y.HasResult || y.ResultFingerprint()|1 == res ||
				y.IsError && c.IsError && y.ErrorSignature() == c.ErrorSignature() {
				return true
			}
		}
	}
	return false
}
