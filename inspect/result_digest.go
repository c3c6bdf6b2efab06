package inspect

import (
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// resultDigest is everything the detectors read of a tool result, kept
// by the session cache instead of the result's text: tool output is most
// of a history, and a cached session would otherwise hold a copy of it.
// Each field is what a rule computes from Call.Result, computed once.
type resultDigest struct {
	fp       uint64 // ResultFingerprint
	evidence string // the Evidence.Result withOutcome reports for the call
	negative bool   // negativeResult
	ack      bool   // isAck
	lines    bool   // the output's first 2 KiB show 3 lines or more (a looking call's content)
}

// digestResult replaces c's result text by its digest. A result some rule
// reads beyond the digest keeps its text (see keepsResult).
func digestResult(c *Call) {
	if !c.HasResult || c.digest != nil || keepsResult(c) {
		return
	}
	d := &resultDigest{
		negative: negativeResult(c.Result),
		ack:      isAck(c.Result),
		lines:    showsLines(outputText(c.Result)),
	}
	// One normalisation serves the fingerprint and the evidence when the
	// text is no longer than what the evidence normalises (normalizedText).
	rt := resultText(c.Result)
	withNormalized(rt, func(b []byte) {
		d.fp = normalizedHash(b)
		if len(rt) <= maxNormalizedText {
			d.evidence = strings.Clone(shortCollapsed(unsafe.String(unsafe.SliceData(b), len(b)), maxOutcome))
		}
	})
	if len(rt) > maxNormalizedText {
		d.evidence = outcomeText(c.Result)
	}
	c.digest = d
	c.Result = ""
}

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
	return c.IsError && namesSyntaxError(c.ErrorText)
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
	if d := c.digest; d != nil {
		return d.negative
	}
	return negativeResult(c.Result)
}

func (c *Call) isAck() bool {
	if d := c.digest; d != nil {
		return d.ack
	}
	return isAck(c.Result)
}

func (c *Call) showsLines() bool {
	if d := c.digest; d != nil {
		return d.lines
	}
	return showsLines(outputText(c.Result))
}

// outcome is the result as Evidence.Result reports it.
func (c *Call) outcome() string {
	if d := c.digest; d != nil {
		return d.evidence
	}
	return outcomeText(c.Result)
}

func outcomeText(res string) string {
	return shortCollapsed(normalizedText(resultText(res)), maxOutcome)
}

// maxOutcome is the length of Evidence.Result.
const maxOutcome = 300

// shortCollapsed is shorten(collapseSpace(s), n), reading s only as far as
// the first n+1 bytes of the collapsed text: a tool's output is long, and
// the evidence shows its beginning.
func shortCollapsed(s string, n int) string {
	// collapseSpace's test, a line break first: output has one early,
	// and a long text without one is read to its end.
	if !strings.ContainsAny(s, "\t\r\n") && !strings.Contains(s, "  ") {
		return shorten(s, n) // collapseSpace leaves it as it is
	}
	// strings.Join(strings.Fields(s), " ") up to n+1 bytes.
	b := make([]byte, 0, 2*n+utf8.UTFMax+2)
	space := false // a space is due before the next field
	for i := 0; i < len(s) && len(b) <= n; {
		// A run of ASCII bytes that are no space, else one rune.
		end, isSpace := i, false
		for end < len(s) && s[end] < utf8.RuneSelf && !asciiSpace[s[end]] && end-i <= n {
			end++
		}
		if end == i {
			r, size := utf8.DecodeRuneInString(s[i:])
			end, isSpace = i+size, unicode.IsSpace(r)
		}
		switch {
		case isSpace:
			space = len(b) > 0
		case space:
			b = append(append(b, ' '), s[i:end]...)
			space = false
		default:
			b = append(b, s[i:end]...)
		}
		i = end
	}
	return shorten(string(b), n)
}

// asciiSpace marks the ASCII bytes unicode.IsSpace reports.
var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}
