package demo

import (
	"fmt"
	"io"
	"strings"
)

// ANSI SGR codes used by the transcript.
const (
	sgrBold    = "1"
	sgrDim     = "2"
	sgrRed     = "31"
	sgrGreen   = "32"
	sgrYellow  = "33"
	sgrMagenta = "35"
	sgrCyan    = "36"
)

// labelWidth is the width of the label column ("loopguard", "model saw").
const labelWidth = 11

// wrapWidth is where long texts wrap: a terminal of 100 columns.
const wrapWidth = 100

// printer writes the transcript. It keeps the first write error and skips
// later writes, so call sites need no error checks; Run reports it at the end.
type printer struct {
	w     io.Writer
	color bool
	err   error
}

func (p *printer) printf(format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format, args...)
}

// paint wraps s in an SGR sequence when colour is on.
func (p *printer) paint(code, s string) string {
	if !p.color || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// heading prints a scenario title.
func (p *printer) heading(title string) {
	p.printf("\n%s\n", p.paint(sgrBold+";"+sgrCyan, "== "+title+" =="))
}

// para prints a paragraph wrapped at wrapWidth.
func (p *printer) para(text string) {
	for _, line := range wrap(text, wrapWidth) {
		p.printf("%s\n", line)
	}
}

// line prints one labelled line; text wraps under itself.
func (p *printer) line(label, labelColor, text string) {
	lines := wrap(text, wrapWidth-labelWidth-3)
	if len(lines) == 0 {
		lines = []string{""}
	}
	pad := strings.Repeat(" ", labelWidth-len(label))
	p.printf("   %s%s%s\n", p.paint(labelColor, label), pad, lines[0])
	for _, l := range lines[1:] {
		p.printf("   %s%s\n", strings.Repeat(" ", labelWidth), l)
	}
}

// block prints a multi-line text under a label, each line indented and
// dimmed, at most maxLines lines (0: all).
func (p *printer) block(text string, maxLines int) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	cut := 0
	if maxLines > 0 && len(lines) > maxLines {
		cut = len(lines) - maxLines
		lines = lines[:maxLines]
	}
	indent := strings.Repeat(" ", labelWidth+3)
	for _, l := range lines {
		for _, w := range wrap(l, wrapWidth-labelWidth-5) {
			p.printf("%s%s %s\n", indent, p.paint(sgrDim, "|"), p.paint(sgrDim, w))
		}
	}
	if cut > 0 {
		p.printf("%s%s\n", indent, p.paint(sgrDim, fmt.Sprintf("| ... (%d more lines)", cut)))
	}
}

// wrap breaks text into lines of at most width bytes at spaces; a word
// longer than width gets a line of its own. Newlines in text are kept.
func wrap(text string, width int) []string {
	var out []string
	for _, para := range strings.Split(text, "\n") {
		words := strings.Fields(para)
		if len(words) == 0 {
			out = append(out, "")
			continue
		}
		cur := words[0]
		for _, w := range words[1:] {
			if len(cur)+1+len(w) > width {
				out = append(out, cur)
				cur = w
				continue
			}
			cur += " " + w
		}
		out = append(out, cur)
	}
	return out
}

// shorten cuts s to n bytes at a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// oneLine folds newlines and tabs so that a tool output fits one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
