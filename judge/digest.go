package judge

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// Field limits of the digest: enough to tell one approach from another,
// never a whole tool output.
const (
	maxTask   = 600
	maxPlan   = 240
	maxArgs   = 200
	maxResult = 160
	maxSteps  = 30
)

// Digest renders the end of t for the judge in at most max bytes: the
// user's task, then the most recent steps oldest first, each as the
// assistant's stated plan and its calls (tool, canonical arguments,
// shortened) with the first line of each result or error. Full tool
// outputs are never included. The returned string shares nothing with t,
// so it may outlive t's Release.
func Digest(t *inspect.Trajectory, task string, max int) string {
	var b strings.Builder
	b.WriteString("TASK: ")
	b.WriteString(oneLine(task, maxTask))
	b.WriteString("\n\nRECENT STEPS (oldest first):\n")
	head := b.Len()
	if t == nil || len(t.Steps) == 0 {
		return b.String()
	}
	// Newest first, until the budget is spent; then put back in order.
	var lines []string
	used := head
	from := len(t.Steps)
	for i := len(t.Steps) - 1; i >= 0 && len(t.Steps)-i <= maxSteps; i-- {
		s := step(i, &t.Steps[i])
		if used+len(s) > max {
			break
		}
		used += len(s)
		lines = append(lines, s)
		from = i
	}
	if from > 0 {
		b.WriteString("(" + strconv.Itoa(from) + " earlier steps left out)\n")
	}
	for i := len(lines) - 1; i >= 0; i-- {
		b.WriteString(lines[i])
	}
	return b.String()
}

// step renders one assistant turn.
func step(i int, s *inspect.Step) string {
	var b strings.Builder
	n := strconv.Itoa(i + 1)
	if txt := oneLine(s.Text, maxPlan); txt != "" {
		b.WriteString("#" + n + " said: " + txt + "\n")
	}
	for j := range s.Calls {
		c := &s.Calls[j]
		b.WriteString("#" + n + " call " + c.Name + " " + oneLine(c.Args, maxArgs))
		switch {
		case c.IsError && c.ErrorText() != "":
			b.WriteString(" -> ERROR: " + oneLine(c.ErrorText(), maxResult))
		case c.IsError:
			b.WriteString(" -> ERROR: " + firstLine(c.Result, maxResult))
		case c.Result != "":
			b.WriteString(" -> " + firstLine(c.Result, maxResult))
		case c.HasResult:
			b.WriteString(" -> (result not kept)")
		default:
			b.WriteString(" -> (no result yet)")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// firstLine is the first non-blank line of s, shortened, with how many
// lines were left out.
func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	first, rest, more := strings.Cut(s, "\n")
	out := oneLine(first, n)
	if more {
		out += " [+" + strconv.Itoa(strings.Count(rest, "\n")+1) + " lines]"
	}
	return out
}

// oneLine collapses whitespace runs to one space and cuts s to n bytes on
// a rune boundary.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Task returns the text of the first user message of a request body of any
// wire API loopguard guards (the registry's history members,
// internal/wireapi: chat completions' and Anthropic's "messages",
// Responses' "input", Gemini's "contents" of parts), shortened: the
// original task the judge measures progress against. "" when there is
// none.
func Task(body []byte) string {
	var r gjson.Result
	for i := range wireapi.APIs {
		a := &wireapi.APIs[i]
		path := a.History
		if a.Wrap != "" {
			path = a.Wrap + "." + path
		}
		h := gjson.GetBytes(body, path)
		if h.Type == gjson.String { // Responses' input, a prompt
			r = h
			break
		}
		if u := h.Get(`#(role=="user")`); u.Exists() {
			if r = u.Get("content"); !r.Exists() {
				r = u.Get("parts")
			}
			break
		}
	}
	if r.Type == gjson.String {
		return oneLine(r.String(), maxTask)
	}
	var parts []string
	r.ForEach(func(_, p gjson.Result) bool {
		if t := p.Get("text"); t.Exists() {
			parts = append(parts, t.String())
		}
		return true
	})
	return oneLine(strings.Join(parts, " "), maxTask)
}
