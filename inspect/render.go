package inspect

import (
	"fmt"
	"strings"
)

// Brief renders the pattern for a log line, e.g. `bash(git status) x5`.
// It never exceeds 80 bytes and cuts arguments to 40, so logs do not
// carry long argument content. The zero Verdict renders "".
func (v Verdict) Brief() string {
	if len(v.Detections) == 0 {
		return ""
	}
	ev := &v.Detections[0].Evidence
	suffix := fmt.Sprintf(" x%d", ev.Count)
	return shorten(ev.Element, 80-len(suffix)) + suffix
}

// ruleText says what each rule saw, for people.
var ruleText = map[Category]string{
	ToolRepetition:   "the same call was repeated",
	ToolCycle:        "the same sequence of calls repeated",
	ParamDrift:       "the same tool was retried with slightly changed arguments",
	SameResult:       "different calls kept returning the same result",
	ErrorCycle:       "the same error came back",
	WhackAMole:       "errors kept taking turns despite the fixes",
	TestFixCycle:     "the same test/build command kept failing",
	EditUndo:         "an edit was undone and redone",
	OutputRepetition: "the assistant repeated its own text",
	SummaryLoop:      "the assistant replied with text only, without doing work",
	SemanticLoop:     "a judge model read the recent steps and found the same approach retried without progress",
}

// Summary renders one sentence for people naming the rule, the element,
// the count and the threshold.
func (v Verdict) Summary() string {
	if len(v.Detections) == 0 {
		return ""
	}
	d := &v.Detections[0]
	ev := &d.Evidence
	if d.Category == SemanticLoop {
		// The judge counts nothing against a threshold: what it saw, in its
		// words, and how sure it was.
		return fmt.Sprintf("%s: %s: %s (judge confidence %.2f).", d.Category, ruleText[d.Category], ev.Element, d.Score)
	}
	np := ""
	if ev.NoProgress {
		np = " with no progress"
	}
	return fmt.Sprintf("%s: %s%s: %s x%d (threshold %d, confidence %.2f).",
		d.Category, ruleText[d.Category], np, ev.Element, ev.Count, ev.Threshold, d.Score)
}

// Full renders the evidence for the model: the pattern, the call and its
// arguments, the count and the threshold, and the result or error that did
// not change, shortened.
func (v Verdict) Full() string {
	if len(v.Detections) == 0 {
		return ""
	}
	var b strings.Builder
	for i, d := range v.Detections {
		if i == 3 {
			break // the strongest few; more is noise for the model
		}
		ev := &d.Evidence
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Pattern: %s (%s)\n", d.Category, ruleText[d.Category])
		if ev.Tool != "" {
			fmt.Fprintf(&b, "Tool: %s\n", ev.Tool)
		}
		if ev.Args != "" {
			fmt.Fprintf(&b, "Arguments: %s\n", shorten(collapseSpace(ev.Args), 200))
		}
		fmt.Fprintf(&b, "Repeated: %s\n", ev.Element)
		if d.Category == SemanticLoop {
			fmt.Fprintf(&b, "Judge confidence: %.2f, turns %d..%d\n", d.Score, ev.First, ev.Last)
			continue
		}
		fmt.Fprintf(&b, "Count: %d (threshold %d), turns %d..%d\n", ev.Count, ev.Threshold, ev.First, ev.Last)
		if ev.Error != "" {
			fmt.Fprintf(&b, "Error: %s\n", shorten(ev.Error, 300))
		}
		if ev.Result != "" {
			label := "Result"
			if ev.NoProgress {
				label = "Unchanged result"
			}
			fmt.Fprintf(&b, "%s: %s\n", label, shorten(ev.Result, 300))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
