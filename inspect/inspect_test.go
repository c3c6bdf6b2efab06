package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

func mustParse(t testing.TB, body []byte) *Trajectory {
	t.Helper()
	tr, err := Parse(body)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return tr
}

func TestParseBasic(t *testing.T) {
	body, err := os.ReadFile("testdata/parse/basic.json")
	if err != nil {
		t.Fatal(err)
	}
	tr := mustParse(t, body)
	if tr.Model != "gpt-4o" || tr.Messages != 9 || len(tr.Steps) != 2 || tr.Start != 0 {
		t.Fatalf("Parse = model %q, %d messages, %d steps, start %d; want gpt-4o, 9, 2, 0", tr.Model, tr.Messages, len(tr.Steps), tr.Start)
	}
	s0 := tr.Steps[0]
	if s0.Text != "Looking." || len(s0.Calls) != 2 {
		t.Fatalf("step 0 = %+v", s0)
	}
	a, b := s0.Calls[0], s0.Calls[1]
	if a.ID != "a" || a.Result != "package main" || a.ResultMessage != 4 || a.Primary != "read main.go" {
		t.Errorf("call a = %+v", a)
	}
	if b.Args != `{"path":"x.go"}` || b.Result != "package x" || b.ResultMessage != 3 {
		t.Errorf("call b = %+v; want task_progress dropped and result paired by id", b)
	}
	leg := tr.Steps[1].Calls[0]
	if leg.ID != "" || leg.Name != "get" || leg.Args != "not json" || !leg.HasResult || !leg.IsError {
		t.Errorf("legacy call = %+v", leg)
	}
	// Strings must be copies: clobbering the body changes nothing.
	for i := range body {
		body[i] = 'x'
	}
	if a.Result != "package main" || tr.Model != "gpt-4o" {
		t.Errorf("trajectory aliases the body: %q %q", a.Result, tr.Model)
	}
}

func TestParseStart(t *testing.T) {
	body, _ := os.ReadFile("testdata/parse/reset.json")
	tr := mustParse(t, body)
	if tr.Start != 1 {
		t.Errorf("Start = %d; want 1 (after the genuine second task, not after the loop-recovery block)", tr.Start)
	}
}

func TestParseMalformed(t *testing.T) {
	for _, give := range []string{``, `{`, `[]`, `{"messages":{}}`, `{"model":"x"}`, `{"messages":[1]}`, `{"messages":[{"content":"x"}]}`} {
		if _, err := Parse([]byte(give)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) error = %v; want ErrMalformed", give, err)
		}
	}
}

func TestClassifyUser(t *testing.T) {
	tests := []struct {
		give string
		want userKind
	}{
		{"Please fix the login bug", userGenuine},
		{"please continue", userAutomated},
		{"Continue.", userAutomated},
		{"<returncode>0</returncode>\n<output>\nok\n</output>", userToolOutput},
		{"Observation: file created", userToolOutput},
		{"[read_file for 'a.go'] Result:\npackage a", userToolOutput},
		{"Here is a summary of the conversation so far: ...", userAutomated},
		{"[loopguard] loop detected", userAutomated},
		{"<loop-recovery reset=\"2\">...</loop-recovery>", userAutomated},
		{"Tool call error:\n<error>bad</error>", userAutomated},
	}
	for _, tt := range tests {
		if got := classifyUser(tt.give); got != tt.want {
			t.Errorf("classifyUser(%q) = %v; want %v", tt.give, got, tt.want)
		}
	}
}

func TestNormalizeShell(t *testing.T) {
	tests := []struct{ give, want string }{
		{"cat f.py", "read f.py"},
		{"head -n 50 f.py", "read f.py"},
		{"head -5 f.py", "read f.py"},
		{"tail f.py", "read f.py"},
		{"less  'f.py'", "read f.py"},
		{"more f.py", "read f.py"},
		{"cat f.py | grep x", "cat f.py | grep x"},
		{"cat f.py > g", "cat f.py > g"},
		{"cd a && cat f.py", "cd a && cat f.py"},
		{"cat a b", "cat a b"},
		{"git   status", "git status"},
	}
	for _, tt := range tests {
		if got := normalizeShell(tt.give); got != tt.want {
			t.Errorf("normalizeShell(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

func fp(t *testing.T, tool, args string) (uint64, uint64) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "assistant", "tool_calls": []any{
		map[string]any{"id": "x", "type": "function", "function": map[string]any{"name": tool, "arguments": args}}}}}})
	c := mustParse(t, body).Steps[0].Calls[0]
	return c.Fingerprint, c.PrimaryFingerprint
}

func TestFingerprints(t *testing.T) {
	tests := []struct {
		name         string
		a, b         string
		same, sameP  bool
		toolA, toolB string
	}{
		{"key order and spaces", `{"a":1,"b":[1, 2]}`, `{ "b":[1,2], "a":1 }`, true, true, "t", "t"},
		{"metadata dropped", `{"path":"x","task_progress":"1"}`, `{"path":"x","task_progress":"2"}`, true, true, "t", "t"},
		{"cat equals head -n 5", `{"command":"cat f"}`, `{"command":"head -n 5 f"}`, false, true, "bash", "bash"},
		{"other file", `{"command":"cat f"}`, `{"command":"cat g"}`, false, false, "bash", "bash"},
		{"other tool", `{"path":"x"}`, `{"path":"x"}`, false, false, "read", "view"},
		{"unparsable trimmed", ` not json `, `not json`, true, true, "t", "t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa, pa := fp(t, tt.toolA, tt.a)
			fb, pb := fp(t, tt.toolB, tt.b)
			if (fa == fb) != tt.same {
				t.Errorf("Fingerprint equal = %v; want %v", fa == fb, tt.same)
			}
			if (pa == pb) != tt.sameP {
				t.Errorf("PrimaryFingerprint equal = %v; want %v", pa == pb, tt.sameP)
			}
		})
	}
}

// build makes a request body from a compact script: "bash:CMD=>RESULT"
// lines are tool calls, "say:TEXT" text turns, "user:TEXT" user messages.
func build(lines ...string) []byte {
	msgs := []any{map[string]any{"role": "user", "content": "do the task"}}
	for i, l := range lines {
		kind, rest, _ := strings.Cut(l, ":")
		switch kind {
		case "say":
			msgs = append(msgs, map[string]any{"role": "assistant", "content": rest})
		case "user":
			msgs = append(msgs, map[string]any{"role": "user", "content": rest})
		default:
			call, res, _ := strings.Cut(rest, "=>")
			args, _ := json.Marshal(map[string]string{"command": call})
			if kind != "bash" {
				args = []byte(call)
			}
			id := fmt.Sprintf("c%d", i)
			msgs = append(msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": kind, "arguments": string(args)}}}},
				map[string]any{"role": "tool", "tool_call_id": id, "content": res})
		}
	}
	b, _ := json.Marshal(map[string]any{"model": "test-model", "messages": msgs})
	return b
}

func rep(n int, s ...string) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, s...)
	}
	return out
}

func TestOverrides(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Tools = map[string]ToolOverride{"poll": {RepeatConsecutive: 6}}
	cfg.Models = map[string]Override{"test-*": {Disable: []string{"tool_cycle"}}}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v := e.Inspect(mustParse(t, build(rep(4, "poll:{}=>same")...))); v.Loop {
		t.Errorf("per-tool threshold 6: x4 = %s; want no loop", v.Summary())
	}
	if v := e.Inspect(mustParse(t, build(rep(6, "poll:{}=>same")...))); !v.Loop {
		t.Errorf("per-tool threshold 6: x6 not a loop")
	}
	if v := e.Inspect(mustParse(t, build(rep(4, "bash:cat a=>A", "bash:cat b=>B")...))); hasCategory(v, string(ToolCycle)) {
		t.Errorf("tool_cycle disabled for test-*: got %v", v.Detections)
	}
	if !MatchesModel("gpt-4*", "gpt-4o") || MatchesModel("gpt-4*", "claude") || MatchesModel("[", "x") {
		t.Error("MatchesModel globbing wrong")
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	cfg := DefaultConfig()
	cfg.Single = 2
	cfg.Window = 0
	cfg.ErrorPatterns = []string{"("}
	cfg.Models = map[string]Override{"x": {Disable: []string{"nope"}}}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate() = nil; want errors")
	}
	for _, key := range []string{"single_threshold", "window", "error_patterns[0]", "models.x.disable"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("Validate() = %v; want it to name %s", err, key)
		}
	}
	if _, err := NewEngine(cfg); err == nil {
		t.Error("NewEngine(bad) = nil error")
	}
}

func TestErrorPatterns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ErrorPatterns = []string{`^DENIED\b`}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	give := []string{"bash:deploy a=>DENIED by policy", "bash:deploy b=>DENIED by policy", "bash:deploy c=>DENIED by policy"}
	if v := e.Inspect(mustParse(t, build(give...))); !v.Loop {
		t.Errorf("custom error pattern: got %v; want a loop", v.Detections)
	}
}

func TestAggregate(t *testing.T) {
	cfg := DefaultConfig()
	lim := cfg.resolve("")
	tests := []struct {
		name   string
		scores []float64
		want   bool
	}{
		{"single strong", []float64{0.95}, true},
		{"single at trigger warn", []float64{0.74}, false},
		{"single warn above weight", []float64{0.8}, true},
		{"two above pair", []float64{0.72, 0.71}, true},
		{"weighted combination", []float64{0.4, 0.4}, true},
		{"weak", []float64{0.3, 0.3}, false},
	}
	for _, tt := range tests {
		var dets []Detection
		for i, s := range tt.scores {
			dets = append(dets, Detection{Category: Categories[i], Score: s, Evidence: Evidence{Tool: "t", Args: fmt.Sprint(i)}})
		}
		v := aggregate(dets, &lim)
		if v.Loop != tt.want {
			t.Errorf("%s: aggregate(%v).Loop = %v; want %v", tt.name, tt.scores, v.Loop, tt.want)
		}
		if v.Confidence != max(tt.scores[0], tt.scores[len(tt.scores)-1]) {
			t.Errorf("%s: Confidence = %v; want the strongest", tt.name, v.Confidence)
		}
	}
}

func TestPatternKeyStable(t *testing.T) {
	e, _ := NewEngine(DefaultConfig())
	a := e.Inspect(mustParse(t, build(rep(3, "bash:git status=>clean")...)))
	b := e.Inspect(mustParse(t, build(append([]string{"bash:ls=>x"}, rep(4, "bash:git status=>clean")...)...)))
	if a.PatternKey == "" || a.PatternKey != b.PatternKey {
		t.Errorf("PatternKey %q vs %q; want equal and non-empty", a.PatternKey, b.PatternKey)
	}
	c1 := e.Inspect(mustParse(t, build(rep(3, "bash:cat a=>A", "bash:cat b=>B")...)))
	c2 := e.Inspect(mustParse(t, build(append(rep(3, "bash:cat a=>A", "bash:cat b=>B"), "bash:cat a=>A")...)))
	if c1.PatternKey != c2.PatternKey {
		t.Errorf("cycle PatternKey changes with phase: %q vs %q", c1.PatternKey, c2.PatternKey)
	}
}

func TestRender(t *testing.T) {
	e, _ := NewEngine(DefaultConfig())
	long := strings.Repeat("x", 500)
	v := e.Inspect(mustParse(t, build(rep(5, "bash:git status "+long+"=>fatal: not a git repository")...)))
	if !v.Loop {
		t.Fatal("want loop")
	}
	brief := v.Brief()
	if len(brief) > 80 || !strings.HasPrefix(brief, "bash(git status") || !strings.HasSuffix(brief, " x5") || strings.Contains(brief, strings.Repeat("x", 50)) {
		t.Errorf("Brief() = %q; want <= 80 bytes, shortened args, x5", brief)
	}
	sum := v.Summary()
	for _, w := range []string{"tool_repetition", "x5", "threshold 3"} {
		if !strings.Contains(sum, w) {
			t.Errorf("Summary() = %q; want it to contain %q", sum, w)
		}
	}
	full := v.Full()
	for _, w := range []string{"Pattern: tool_repetition", "Tool: bash", "Count: 5 (threshold 3)", "fatal: not a git repository"} {
		if !strings.Contains(full, w) {
			t.Errorf("Full() = %q; want it to contain %q", full, w)
		}
	}
	if (Verdict{}).Brief() != "" || (Verdict{}).Full() != "" {
		t.Error("zero Verdict renders non-empty")
	}
}

func TestInspectConcurrent(t *testing.T) {
	e, _ := NewEngine(DefaultConfig())
	tr := mustParse(t, build(rep(3, "bash:cat a=>A", "bash:cat b=>B")...))
	want := e.Inspect(tr).PatternKey
	done := make(chan string)
	for i := 0; i < 8; i++ {
		go func() {
			var k string
			for j := 0; j < 50; j++ {
				k = e.Inspect(tr).PatternKey
			}
			done <- k
		}()
	}
	for i := 0; i < 8; i++ {
		if got := <-done; got != want {
			t.Errorf("concurrent PatternKey = %q; want %q", got, want)
		}
	}
}
