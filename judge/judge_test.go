package judge

import (
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
)

func TestParseVerdict(t *testing.T) {
	tests := []struct {
		name string
		give string
		want Verdict
		ok   bool
	}{
		{"schema answer", `{"stuck":true,"confidence":0.8,"what_repeats":"reinstalling"}`, Verdict{true, 0.8, "reinstalling"}, true},
		{"fenced", "```json\n{\"stuck\": true, \"confidence\": 1.7, \"what_repeats\": \"x\"}\n```", Verdict{true, 1, "x"}, true},
		{"not stuck", `{"stuck":false,"confidence":0.9,"what_repeats":""}`, Verdict{}, true},
		{"prose", "The agent seems fine.", Verdict{}, false},
		{"no confidence", `{"stuck":true}`, Verdict{}, false},
		{"string confidence", `{"stuck":true,"confidence":"high"}`, Verdict{}, false},
		{"empty", "", Verdict{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseVerdict(tt.give)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseVerdict(%q) = %+v, %v; want %+v, %v", tt.give, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	for give, want := range map[string]string{
		"http://h:1":                      "http://h:1/v1/chat/completions",
		"http://h:1/v1/":                  "http://h:1/v1/chat/completions",
		"http://h:1/v1/chat/completions":  "http://h:1/v1/chat/completions",
		"https://h/openai/v1":             "https://h/openai/v1/chat/completions",
		"https://h/x/chat/completions///": "https://h/x/chat/completions",
	} {
		if got := Endpoint(give); got != want {
			t.Errorf("Endpoint(%q) = %q; want %q", give, got, want)
		}
	}
}

// TestDigestIsBounded: the digest names the task, the calls and the first
// line of each result, never a whole output, and stays within its bound
// keeping the newest steps.
func TestDigestIsBounded(t *testing.T) {
	long := "first line of output\n" + strings.Repeat("SECRET-REST ", 2000)
	tr := &inspect.Trajectory{}
	for i := range 50 {
		tr.Steps = append(tr.Steps, inspect.Step{Text: "I will try again.", Calls: []inspect.Call{
			{Name: "bash", Args: `{"command":"make test` + strings.Repeat("x", i) + `"}`, Result: long, HasResult: true}}})
	}
	d := Digest(tr, "Fix the build.\n\nPlease.", 2000)
	if len(d) > 2000 {
		t.Errorf("len(Digest) = %d; want <= 2000", len(d))
	}
	for _, want := range []string{"TASK: Fix the build. Please.", "#50 call bash", "first line of output [+1 lines]", "earlier steps left out"} {
		if !strings.Contains(d, want) {
			t.Errorf("Digest lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "SECRET-REST") {
		t.Errorf("Digest holds a whole tool output:\n%s", d)
	}
}

func TestTask(t *testing.T) {
	for give, want := range map[string]string{
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"do X"}]}`:                   "do X",
		`{"messages":[{"role":"user","content":[{"type":"text","text":"do"},{"type":"text","text":"Y"}]}]}`: "do Y",
		`{"input":"do Z"}`: "do Z",
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"do W"}]}]}`: "do W",
		`{"model":"m"}`: "",
		`{"contents":[{"role":"user","parts":[{"text":"do"},{"text":"V"}]}]}`:                            "do V",
		`{"model":"m","project":"p","request":{"contents":[{"role":"user","parts":[{"text":"do U"}]}]}}`: "do U",
	} {
		if got := Task([]byte(give)); got != want {
			t.Errorf("Task(%s) = %q; want %q", give, got, want)
		}
	}
}

// TestDueSchedule: no check before min_turns, then every Every turns,
// sooner after an alert, and none over the session's budget.
func TestDueSchedule(t *testing.T) {
	var skipped []Outcome
	cfg := DefaultConfig()
	cfg.Enabled, cfg.Model, cfg.MinTurns, cfg.Every, cfg.EveryDoubtful, cfg.SessionCallsPerMinute = true, "m", 3, 4, 1, 2
	j := New(cfg, func(r Result) { skipped = append(skipped, r.Outcome) })
	defer j.Close()
	now := time.Unix(1000, 0)
	j.now = func() time.Time { return now }
	var due []int
	for steps := 1; steps <= 12; steps++ {
		if j.Due("s", steps, steps == 8) {
			due = append(due, steps)
		}
	}
	// 3 and 7 on the rhythm; the alert at 8 brings the next check to 9,
	// but the budget of 2 a minute is spent: skipped and counted.
	if want := []int{3, 7}; !equal(due, want) {
		t.Errorf("due at %v; want %v", due, want)
	}
	now = now.Add(time.Minute)
	if !j.Due("s", 13, true) {
		t.Errorf("Due after the budget's minute = false; want true")
	}
	if len(skipped) == 0 || skipped[0] != OverBudget {
		t.Errorf("skipped = %v; want an over_budget report", skipped)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
