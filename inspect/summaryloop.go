package inspect

import (
	"slices"
	"strings"
)

// summary_loop: text-only turns without progress, and failing answers turn after turn.

// summaryLoop: in a session that uses tools, the latest assistant turns
// carry only text (summaries, plans, "I will now...") with no tool call:
// the agent talks instead of working.
func (in *inspection) summaryLoop() (Detection, bool) {
	if d, ok := in.contextChurn(); ok {
		return d, true
	}
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

// contextChurn: the client cuts its context again and again with no work
// between (condensation or trimming notices, context-length errors sent
// back): the agent fills the window the same way each time and cannot
// leave by itself (OpenHands' context_window_error). The notices of the
// last SummaryCount cuts count while no step between two of them, nor
// after the last, did work (see didWork).
func (in *inspection) contextChurn() (Detection, bool) {
	t := in.t
	var at [len(churnMarks{}.at) + 3]int
	marks := at[:0]
	for _, p := range t.churn.last() {
		if int(p) >= t.Start && int(p) <= len(t.Steps) {
			marks = append(marks, int(p))
		}
	}
	// A context-length error as a tool's answer is a cut the agent saw
	// in the answer of its latest calls.
	for a := max(0, len(in.evs)-3); a < len(in.evs); a++ {
		if x := &in.evs[a]; x.isErr && contextError(x.c.ErrorText()) {
			marks = append(marks, x.step+1)
		}
	}
	if len(marks) == 0 {
		return Detection{}, false
	}
	slices.Sort(marks)
	marks = slices.Compact(marks)
	end := len(t.Steps)
	if in.didWork(marks[len(marks)-1], end) {
		return Detection{}, false
	}
	n := 1
	for i := len(marks) - 1; i > 0 && !in.didWork(marks[i-1], marks[i]); i-- {
		n++
	}
	thr := in.lim.SummaryCount
	if n < thr {
		return Detection{}, false
	}
	first := marks[len(marks)-n]
	var steps []int
	for s := max(0, first-1); s < end; s++ {
		steps = append(steps, s)
	}
	if len(steps) == 0 {
		return Detection{}, false
	}
	d := Detection{Score: grow(strongBase, strongStep, n, thr, 1)}
	d.Evidence = Evidence{
		Element: "context cut to fit the window again and again", Count: n, Threshold: thr,
		First: steps[0], Last: steps[len(steps)-1], Steps: steps, NoProgress: true,
	}
	return d, true
}

// didWork reports whether steps [from, to) hold a call that succeeded
// doing something: a change, or a look at something not looked at
// before in the reach (re-reading what filled the context is no work).
func (in *inspection) didWork(from, to int) bool {
	for a := range in.evs {
		x := &in.evs[a]
		if x.step < from || x.step >= to || !x.has || x.isErr {
			continue
		}
		if !x.c.onlyLooks() {
			return true
		}
		seen := false
		for b := range a {
			if in.evs[b].fp == x.fp {
				seen = true
				break
			}
		}
		if !seen {
			return true
		}
	}
	return false
}

// contextError reports an error text that says the model's context was
// exceeded.
func contextError(e string) bool {
	l := strings.ToLower(e)
	for _, p := range [...]string{"context length", "context_length", "context window", "maximum context", "prompt is too long", "too many tokens"} {
		if strings.Contains(l, p) {
			return true
		}
	}
	return false
}
