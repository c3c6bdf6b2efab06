package inject

import (
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/loopguard/loopguard/inspect"
)

// Marker starts every plain-text notice loopguard injects (warnings, the
// degeneration notice, collapse notes), so that the trajectory builder can
// recognise loopguard's own text and never count it as the agent's progress.
const Marker = "[loopguard]"

// RecoveryTag opens the constrain block; like Marker it identifies
// loopguard's text in a history.
const RecoveryTag = "<loop-recovery"

// TerminatePrefix starts the content of every LOOP_DETECTED answer.
const TerminatePrefix = "LOOP_DETECTED:"

// DefaultWarnTemplate is the warn action's notice.
const DefaultWarnTemplate = Marker + ` Possible loop: {{.Rule}} fired on {{.Brief}} (count {{.Count}}, threshold {{.Threshold}}).` +
	`{{if .Error}} The same error came back each time: "{{.Error}}".{{else if .Result}} The result did not change: "{{.Result}}".{{end}}` +
	` Repeating it will not help; try a different approach.`

// DefaultConstrainTemplate is the <loop-recovery> block of docs/design.md
// section 4.
const DefaultConstrainTemplate = `<loop-recovery reset="{{.Reset}}" urgency="{{.Urgency}}">
Loop detected: {{.Rule}} — {{.Summary}}
Pattern: {{.Brief}}{{if .Args}}   Arguments: {{.Args}}{{end}}   Count: {{.Count}} (threshold {{.Threshold}})
{{if .Error}}Repeated error: {{.Error}}
{{else if .Result}}Unchanged result: {{.Result}}
{{end}}Constraints:
{{range .Constraints}}- {{.}}
{{end}}Suggestions:
{{range .Suggestions}}- {{.}}
{{end}}{{if .Failed}}Approaches that already failed in this session:
{{range .Failed}}- {{.}}
{{end}}{{end}}{{if .OtherSessions}}(This loop is also seen across {{.OtherSessions}} other sessions.)
{{end}}</loop-recovery>`

// DefaultDegeneratedTemplate is the notice sent with the request that follows
// a cut stream.
const DefaultDegeneratedTemplate = Marker + ` Your previous answer degenerated into repetition ({{.Rule}}) and was cut off` +
	`{{if .Snippet}} at: {{.Snippet}}{{end}}. Do not repeat it; continue with a short answer in different words.`

// DefaultTerminateTemplate is the content of the LOOP_DETECTED answer.
const DefaultTerminateTemplate = TerminatePrefix + ` {{.Rule}} — {{.Summary}}
Pattern: {{.Brief}} (count {{.Count}}, threshold {{.Threshold}}).{{if .Error}} Repeated error: {{.Error}}{{else if .Result}} Unchanged result: {{.Result}}{{end}}
{{if .Attempts}}Attempts:
{{range .Attempts}}- {{.}}
{{end}}{{end}}{{if .Failed}}Approaches that failed:
{{range .Failed}}- {{.}}
{{end}}{{end}}loopguard ended this loop without calling the model. Change the approach or ask for help before retrying.`

// DefaultCollapseNoteTemplate is appended to the kept result of a collapsed loop.
const DefaultCollapseNoteTemplate = Marker + ` this call was repeated {{.Count}} times with the same result; the repeats were removed`

// Urgency grades a <loop-recovery> block.
type Urgency string

// The urgencies.
const (
	Warning  Urgency = "warning"
	Critical Urgency = "critical"
)

// Loop is what the caller knows about one loop pattern, beyond the verdict:
// the proxy fills it from policy's decision.
type Loop struct {
	Verdict inspect.Verdict
	// Urgency of the block; "" means warning.
	Urgency Urgency
	// Collapse asks Apply to remove the repeats of this loop from the history
	// before rendering (the reset action). Render fills Reset from it.
	Collapse bool
	// Reset is the number of repeated turns removed from this request's
	// history, the reset="N" attribute. Apply sets it when Collapse is true.
	Reset int
	// Failed lists approaches that already failed in this session, as short
	// human-readable lines (the session store keeps them).
	Failed []string
	// OtherSessions counts other sessions where the same pattern loops
	// (cross-session incident); 0 leaves the line out.
	OtherSessions int
	// Budget, when set, makes this the session budget's text instead of
	// the loop's: Warning renders the warning share, TerminateText
	// BUDGET_EXCEEDED.
	Budget *Budget
}

// Budget is a session budget as the texts name it: the bound reached
// ("tokens" or "turns"), its use and its limit.
type Budget struct {
	Kind        string
	Used, Limit int64
}

// BudgetPrefix starts the content of every BUDGET_EXCEEDED answer.
const BudgetPrefix = "BUDGET_EXCEEDED:"

// The error form's type and code of a BUDGET_EXCEEDED answer.
const (
	BudgetErrorType = "budget_exceeded"
	BudgetErrorCode = "BUDGET_EXCEEDED"
)

// budgetWarning is the warning joined to a request once a session used
// most of its budget: the agent is to end the task, not to start another
// step it cannot finish.
func budgetWarning(b *Budget) string {
	return fmt.Sprintf("%s Session budget: %d of %d %s used. Finish now: stop starting new work, "+
		"summarise what was done and what is left, and end your turn.", Marker, b.Used, b.Limit, budgetUnit(b.Kind))
}

// budgetExceeded is the content of the BUDGET_EXCEEDED answer.
func budgetExceeded(b *Budget) string {
	return fmt.Sprintf("%s this session used %d of its %d %s. loopguard ended the session without calling the model; "+
		"raise the budget or start a new session to go on.", BudgetPrefix, b.Used, b.Limit, budgetUnit(b.Kind))
}

func budgetUnit(kind string) string {
	if kind == "turns" {
		return "model calls"
	}
	return "tokens"
}

// errorKind is the error form's type and code of l's terminate answer.
func errorKind(l Loop) (typ, code string) {
	if l.Budget != nil {
		return BudgetErrorType, BudgetErrorCode
	}
	return LoopErrorType, LoopErrorCode
}

// Degeneration describes a stream that was cut for degenerate repetition.
type Degeneration struct {
	Category inspect.Category
	// Snippet is the repeated text; it is shortened when rendered.
	Snippet string
}

// Notice is the data every text template sees. Strings are single lines,
// shortened to Config.MaxFieldBytes.
type Notice struct {
	Rule    string // the category, e.g. "tool_repetition"
	Summary string // one sentence for people
	Brief   string // the pattern, e.g. `bash(git status)`
	Element string // the repeated element
	Tool    string // the repeated tool, "" for text-only families
	Args    string // canonical arguments of the repeated call
	Result  string // the result that did not change
	Error   string // the repeated error signature
	Snippet string // degenerated text (degeneration notice only)
	// Full is Verdict.Full: the evidence of the strongest detections, several
	// lines, for custom templates; at most MaxTextBytes/2.
	Full string

	Count, Threshold int
	NoProgress       bool

	Reset         int    // repeated turns removed from the history
	Urgency       string // "warning" or "critical"
	Constraints   []string
	Suggestions   []string
	Failed        []string // approaches that already failed in the session
	Attempts      []string // the distinct calls of the loop with their counts
	OtherSessions int
}

// CollapseNote is the data of CollapseNoteTemplate.
type CollapseNote struct {
	Count   int // occurrences of the call in the loop, the kept one included
	Removed int // occurrences removed
}

func sampleNotice() Notice {
	return Notice{
		Rule: "tool_repetition", Summary: "s", Brief: "b", Full: "f", Element: "e", Tool: "t", Args: "{}",
		Result: "r", Error: "e", Snippet: "x", Count: 3, Threshold: 3, Urgency: "warning",
		Constraints: []string{"c"}, Suggestions: []string{"s"}, Failed: []string{"f"}, Attempts: []string{"a"},
		OtherSessions: 1,
	}
}

// builtinSuggestions are the suggestions per category: read the error, try a
// different tool, change the approach, ask the user.
var builtinSuggestions = map[string][]string{
	string(inspect.ToolRepetition): {
		"Use the result you already have: asking again returns the same thing.",
		"Gather new information with a different tool or different arguments.",
		"If the task is done, give your final answer; if you are blocked, ask the user.",
	},
	string(inspect.ToolCycle): {
		"Break the cycle: decide what new information you need and fetch only that.",
		"Change the approach instead of alternating between the same calls.",
		"If you are stuck, summarise what you know and ask the user.",
	},
	string(inspect.ParamDrift): {
		"Small variations of the same call return the same thing; try a different tool or approach.",
		"Check your assumptions about the path, name or query: list what actually exists first.",
		"If you are blocked, ask the user.",
	},
	string(inspect.SameResult): {
		"What you are looking for does not exist in that form: search more broadly or list what exists.",
		"Try a different tool.",
		"If you are blocked, ask the user.",
	},
	string(inspect.ErrorCycle): {
		"Read the error message and fix its cause before running the command again.",
		"Try a different approach to the task.",
		"If you cannot fix it, explain the error to the user and ask for help.",
	},
	string(inspect.WhackAMole): {
		"Each fix has been bringing back the other error: fix both causes in one change.",
		"Re-read the code around both errors before the next edit.",
		"If you cannot fix both, explain the conflict to the user.",
	},
	string(inspect.TestFixCycle): {
		"Read the whole failure output and find the root cause before the next edit.",
		"Try a different, smaller change; go back to the last working state if needed.",
		"If the failure is outside your change, tell the user.",
	},
	string(inspect.EditUndo): {
		"Decide on one version of the file and keep it.",
		"Work out why the edit was reverted before changing the file again.",
	},
	string(inspect.OutputRepetition): {
		"Do not restate what you already said; take the next concrete step.",
		"If the task is complete, give the final answer once.",
	},
	string(inspect.SummaryLoop): {
		"Stop summarising: call a tool that makes progress, or give your final answer.",
		"If you are waiting for something, ask the user.",
	},
	string(inspect.TokenDegeneration): {
		"Write a short answer in different words.",
	},
	string(inspect.SemanticLoop): {
		"The approach above has been tried in several forms and has not worked: stop and find out why before the next step.",
		"Pick a genuinely different approach, or gather the one fact that decides between your hypotheses.",
		"If you are blocked, explain what you tried and ask the user.",
	},
	"default": {
		"Change the approach.",
		"If you are blocked, ask the user.",
	},
}

// Limits on lists in a text, so that a block stays a few KB.
const (
	maxConstraints = 5
	maxFailed      = 8
)

// notice builds the template data for one loop.
func (in *Injector) notice(l Loop) Notice {
	v := l.Verdict
	ev := evidence(v)
	rule := string(v.Category)
	if rule == "" {
		rule = "loop"
	}
	n := in.cfg.MaxFieldBytes
	nt := Notice{
		Rule:          rule,
		Element:       clip(ev.Element, n),
		Tool:          clip(ev.Tool, n),
		Args:          clip(ev.Args, n),
		Result:        clip(ev.Result, n),
		Error:         clip(ev.Error, n),
		Count:         ev.Count,
		Threshold:     ev.Threshold,
		NoProgress:    ev.NoProgress,
		Reset:         l.Reset,
		Urgency:       string(l.Urgency),
		OtherSessions: l.OtherSessions,
	}
	if nt.Urgency == "" {
		nt.Urgency = string(Warning)
	}
	nt.Brief = clip(v.Brief(), n)
	if nt.Brief == "" {
		nt.Brief = brief(ev, n)
	}
	// inspect's Summary names the rule first ("tool_repetition: ..."); the
	// texts name it themselves.
	nt.Summary = clip(strings.TrimPrefix(v.Summary(), rule+": "), 2*n)
	nt.Full = cut(v.Full(), in.cfg.MaxTextBytes/2)
	if nt.Summary == "" {
		nt.Summary = summary(rule, ev, n)
	}
	nt.Constraints = constraints(v.Category, ev, n)
	nt.Suggestions = in.cfg.Suggestions[rule]
	if nt.Suggestions == nil {
		nt.Suggestions = in.cfg.Suggestions["default"]
	}
	if nt.Suggestions == nil {
		nt.Suggestions = builtinSuggestions[rule]
	}
	if nt.Suggestions == nil {
		nt.Suggestions = builtinSuggestions["default"]
	}
	for i, f := range l.Failed {
		if i == maxFailed {
			nt.Failed = append(nt.Failed, fmt.Sprintf("(%d more)", len(l.Failed)-i))
			break
		}
		nt.Failed = append(nt.Failed, clip(f, n))
	}
	for _, c := range distinctCalls(ev) {
		if len(nt.Attempts) == maxConstraints {
			break
		}
		a := "`" + clip(c.name, n) + "`"
		if c.args != "" {
			a += " with `" + clip(c.args, n) + "`"
		}
		nt.Attempts = append(nt.Attempts, a+" ×"+strconv.Itoa(c.count))
	}
	return nt
}

// evidence returns the evidence of the verdict's strongest detection, the one
// its Category names.
func evidence(v inspect.Verdict) inspect.Evidence {
	for _, d := range v.Detections {
		if d.Category == v.Category {
			return d.Evidence
		}
	}
	if len(v.Detections) > 0 {
		return v.Detections[0].Evidence
	}
	return inspect.Evidence{}
}

// brief stands in for Verdict.Brief when it is empty, in the same shape:
// the element and its count, "bash(git status) x5".
func brief(ev inspect.Evidence, n int) string {
	suffix := " x" + strconv.Itoa(ev.Count)
	switch {
	case ev.Element != "":
		return clip(ev.Element, n-len(suffix)) + suffix
	case ev.Tool != "":
		return clip(ev.Tool+"("+ev.Args+")", n-len(suffix)) + suffix
	}
	return "repeated output" + suffix
}

// summary stands in for Verdict.Summary when inspect leaves it empty.
func summary(rule string, ev inspect.Evidence, n int) string {
	what := "the same step"
	if ev.Tool != "" {
		what = "`" + clip(ev.Tool, n) + "`"
	} else if ev.Element != "" {
		what = `"` + clip(ev.Element, n) + `"`
	}
	s := fmt.Sprintf("%s repeated %d times", what, ev.Count)
	if ev.NoProgress {
		s += " without progress"
	}
	return s + "."
}

type distinctCall struct {
	name, args string
	count      int
}

// distinctCalls lists the evidence's calls once each, in order of first
// appearance, with how often each occurred.
func distinctCalls(ev inspect.Evidence) []distinctCall {
	var out []distinctCall
next:
	for _, c := range ev.Calls {
		for i := range out {
			if out[i].name == c.Name && out[i].args == c.Args {
				out[i].count++
				continue next
			}
		}
		out = append(out, distinctCall{name: c.Name, args: c.Args, count: 1})
	}
	if len(out) == 0 && ev.Tool != "" {
		out = append(out, distinctCall{name: ev.Tool, args: ev.Args, count: ev.Count})
	}
	return out
}

// constraints are the "do not" lines of the block, one per distinct call.
func constraints(cat inspect.Category, ev inspect.Evidence, n int) []string {
	var out []string
	switch cat {
	case inspect.OutputRepetition, inspect.SummaryLoop:
		return []string{"Do not repeat your previous answer or summary; take a concrete next step or finish."}
	case inspect.TokenDegeneration:
		return []string{"Do not repeat the same phrase."}
	case inspect.SemanticLoop:
		// The judge names an idea, not a call: commands that differ in
		// wording still carry it out.
		return []string{"Do not retry this approach in other words or with other commands: " + clip(ev.Element, n)}
	}
	for _, c := range distinctCalls(ev) {
		if len(out) == maxConstraints {
			break
		}
		call := "`" + clip(c.name, n) + "`"
		if c.args != "" {
			call += " with `" + clip(c.args, n) + "`"
		}
		switch cat {
		case inspect.ParamDrift:
			out = append(out, "Do not call "+call+" again, nor a variation of these arguments.")
		case inspect.ErrorCycle, inspect.TestFixCycle, inspect.WhackAMole:
			out = append(out, "Do not call "+call+" again before making a substantially different change.")
		default:
			out = append(out, "Do not call "+call+" again.")
		}
	}
	switch cat {
	case inspect.SameResult:
		out = append(out, "Do not try more variations that return the same result.")
	case inspect.EditUndo:
		out = append(out, "Do not revert the earlier edit again.")
	}
	if len(out) == 0 {
		out = append(out, "Do not repeat the same step again.")
	}
	return out
}

// clip makes s one line (whitespace runs become one space, so a multi-line
// result cannot break the block's line structure) and shortens it to at most
// n bytes on a rune boundary, marking the cut with "…".
func clip(s string, n int) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if r == utf8.RuneError || r < ' ' || r == ' ' || r == '\u2028' || r == '\u2029' || r == 0x7f {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if b.Len()+utf8.RuneLen(r) > n {
			// Too long: make room for the ellipsis.
			return cut(b.String()+"…", n)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// cut shortens s to at most n bytes, ending it with "…" when it cuts.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ell = "…"
	i := n - len(ell)
	if i < 0 {
		i = 0
	}
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + ell
}

// limit bounds a rendered text to n bytes. A block whose last line closes it
// ("</loop-recovery>") keeps that line, so a cut block is still well formed.
func limit(s string, n int) string {
	if len(s) <= n {
		return s
	}
	tail := ""
	if i := strings.LastIndexByte(s, '\n'); i >= 0 && strings.HasPrefix(s[i+1:], "</") && len(s)-i < n/2 {
		tail = s[i:]
	}
	return cut(s[:len(s)-len(tail)], n-len(tail)) + tail
}

func (in *Injector) render(tp *template.Template, data any) (string, error) {
	var b strings.Builder
	if err := tp.Execute(&b, data); err != nil {
		return "", fmt.Errorf("inject: render %s: %w", tp.Name(), err)
	}
	return limit(b.String(), in.cfg.MaxTextBytes), nil
}

// Warning renders the warn action's notice for a loop.
func (in *Injector) Warning(l Loop) (string, error) {
	if l.Budget != nil {
		return budgetWarning(l.Budget), nil
	}
	return in.render(in.tpl.warn, in.notice(l))
}

// Constraint renders the <loop-recovery> block for a loop.
func (in *Injector) Constraint(l Loop) (string, error) {
	return in.render(in.tpl.constrain, in.notice(l))
}

// Degenerated renders the notice that tells the model its last answer
// degenerated and was cut.
func (in *Injector) Degenerated(d Degeneration) (string, error) {
	rule := string(d.Category)
	if rule == "" {
		rule = string(inspect.TokenDegeneration)
	}
	return in.render(in.tpl.degenerated, Notice{Rule: rule, Snippet: clip(d.Snippet, in.cfg.MaxFieldBytes), Urgency: string(Warning)})
}

// collapseNote renders the note added to a collapsed loop's kept result.
func (in *Injector) collapseNote(count, removed int) (string, error) {
	return in.render(in.tpl.note, CollapseNote{Count: count, Removed: removed})
}
