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
	if s0.Text != "Looking." || s0.Reasoning != "think" || len(s0.Calls) != 2 {
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

func TestNormalize(t *testing.T) {
	tests := []struct{ a, b string }{
		{"at 2024-05-06T10:11:12.123Z ok", "at 2025-01-01T00:00:00Z ok"},
		{"started 12:01:02", "started 23:59:59"},
		{"id 123e4567-e89b-12d3-a456-426614174000", "id 00000000-0000-0000-0000-000000000000"},
		{"commit 3f9a2b1c4d", "commit 9e8d7c6b5a"},
		{"done in 0.53s", "done in 12.1s"},
		{"took 12ms", "took 250ms"},
		{"finished in 3.2 seconds", "finished in 10 seconds"},
		{"pid 1234 running", "pid 99 running"},
		{"wrote /tmp/tmpab12cd/out.txt", "wrote /tmp/xyz987/out.txt"},
		{"\x1b[31mred\x1b[0m", "red"},
		{"line   \nnext\t", "line\nnext"},
		{"object at 0x7f3a2b1c9d00", "object at 0x7f00deadbeef"},
		{"Uvicorn running on http://127.0.0.1:53211", "Uvicorn running on http://127.0.0.1:40007"},
		{"listening on localhost:43121 (port 43121)", "listening on localhost:38002 (port 38002)"},
		{"e3b1c2a HEAD@{0}: commit: fix", "9f0d4e7 HEAD@{0}: commit: fix"},
		{"  40%|████      | 4/10 [00:01<00:02,  3.10it/s]\r100%|██████████| 10/10 [00:03<00:00,  3.21it/s]", "100%|██████████| 10/10 [00:02<00:00,  4.02it/s]"},
		{"Downloading x.whl (1.2 MB) 3.4 MB/s", "Downloading x.whl (1.2 MB) 12.9 MB/s"},
		{"query took 12 ms", "query took 315 ms"},
		{"Out[7]: 42", "Out[12]: 42"},
		{"Attempt 3: connection refused", "Attempt 4: connection refused"},
		{"saved /home/u/tmpk3j4h5z1/model.pt", "saved /home/u/tmp9qx_2b7a/model.pt"},
	}
	for _, tt := range tests {
		na, nb := string(appendNormalized(nil, tt.a)), string(appendNormalized(nil, tt.b))
		if na != nb {
			t.Errorf("normalise(%q) = %q, normalise(%q) = %q; want equal", tt.a, na, tt.b, nb)
		}
	}
	for _, d := range [][2]string{{"3 failed", "2 failed"}, {"line 10", "line 12"}, {"a.txt", "b.txt"},
		{"a.py:42: E501", "a.py:43: E501"}, {"10/10 tests", "9/10 tests"}, {"epoch 3 loss 0.41", "epoch 4 loss 0.38"},
		{"items[3]", "items[4]"}, {"entry 5", "entry 6"}, {"142.31 kB", "142.35 kB"}} {
		if string(appendNormalized(nil, d[0])) == string(appendNormalized(nil, d[1])) {
			t.Errorf("normalise(%q) == normalise(%q); want different", d[0], d[1])
		}
	}
}

func TestClassifyError(t *testing.T) {
	tests := []struct {
		give     string
		isErr    bool
		wantKind string
	}{
		{"Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad value", true, "ValueError"},
		{"error: cannot find module", true, "error"},
		{"Error: File not found", true, "error"},
		{"ERROR collecting tests", true, "error"},
		{"Process finished with exit code 1", true, "exit 1"},
		{"<returncode>2</returncode>\n<output>\n\n</output>", true, "exit 2"},
		{"Exit status 2", true, "exit 2"},
		{"FAILED tests/t.py::test_a", true, "FAILED"},
		{"bash: foo: command not found", true, "command not found"},
		{"cat: x: No such file or directory", true, "ENOENT"},
		{"old_str not found in file", true, "edit no match"},
		{"ERROR:\nNo replacement was performed, old_str `x = 1` did not appear verbatim in /w/a.py.", true, "edit no match"},
		{"<tool_use_error>String to replace not found in file.\nString: x = 1</tool_use_error>", true, "edit no match"},
		{"The tool execution failed with the following error:\n<error>\nThe SEARCH block:\nx = 1\n...does not match anything in the file.\n</error>", true, "tool error"},
		{"open x: Permission denied", true, "EACCES"},
		{"  File \"x\", line 1\nSyntaxError: invalid syntax", true, "SyntaxError"},
		{"panic: runtime error: index out of range", true, "panic"},
		{"<returncode>0</returncode>\n<output>\nError: printed by the repro\n</output>", false, ""},
		{"all good\n3 passed", false, ""},
		{"exit code: unknown\nexit status 3", true, "exit 3"},
		{"build done\nwarning: x\nfatal: not a git repository", true, "fatal"},
		{"the log ends with fatal: ", false, ""},        // the marker's space is trimmed away
		{"FAILED: could not find x", true, "not found"}, // markers in list order, not by position
		{"Some Error: text", false, ""},
		{"pkg.mod.CustomException: boom", true, "CustomException"},
		{"    12\treturn 13\n", false, ""},
	}
	for _, tt := range tests {
		ei := classifyError(tt.give)
		if ei.isError != tt.isErr || (tt.isErr && ei.kind != tt.wantKind) {
			t.Errorf("classifyError(%q) = %v %q; want %v %q", tt.give, ei.isError, ei.kind, tt.isErr, tt.wantKind)
		}
	}
	sig := func(s string) string { d, _ := appendErrorSig(nil, nil, s); return string(d) }
	if a, b := sig(`File "/repo/a/x.py", line 10: KeyError 'id'`), sig(`File "/other/x.py", line 99: KeyError 'id'`); a != b {
		t.Errorf("error signature differs by path/line: %q vs %q", a, b)
	}
	if a, b := sig("No such file: /w/a.txt"), sig("No such file: /w/b.txt"); a == b {
		t.Errorf("error signature lost the file name: %q", a)
	}
	if a, b := sig("FAIL: TestHandle1: got 9 errors"), sig("FAIL: TestHandle2: got 8 errors"); a == b {
		t.Errorf("error signature lost the digits of a test name: %q", a)
	}
	if a, b := sig("FAIL: TestHandle1: got 9 errors"), sig("FAIL: TestHandle1: got 8 errors"); a != b {
		t.Errorf("error signature differs by a count: %q vs %q", a, b)
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

// cell is a build line: a notebook cell failing with a syntax error at line.
func cell(code string, line int) string {
	return "execute_ipython_cell:" + `{"code":"` + code + `"}=>` + fmt.Sprintf("  Cell In[%d], line %d\n    x = [1, 2\n         ^\nSyntaxError: '[' was never closed", line, line)
}

func rep(n int, s ...string) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, s...)
	}
	return out
}

func TestDetectors(t *testing.T) {
	tests := []struct {
		name   string
		give   []string
		want   Category // "" = no loop
		strong bool     // want Confidence > 0.9
	}{
		{"repetition x3 same result", rep(3, "bash:git status=>clean"), ToolRepetition, true},
		{"repetition x2 only", rep(2, "bash:git status=>clean"), "", false},
		{"polling with changing result", []string{"bash:st=>10%", "bash:st=>20%", "bash:st=>30%", "bash:st=>40%"}, "", false},
		{"cycle A,B x3", rep(3, "bash:cat a=>A", "bash:cat b=>B"), ToolCycle, true},
		{"cycle A,B x2 only", rep(2, "bash:cat a=>A", "bash:cat b=>B"), "", false},
		{"same error x3", []string{"bash:python a.py=>ValueError: x", "bash:python b.py=>ValueError: x", "bash:python c.py=>ValueError: x"}, ErrorCycle, true},
		{"different errors", []string{"bash:python a.py=>ValueError: x", "bash:python a.py --v=>KeyError: y", "bash:python a.py -q=>TypeError: z"}, "", false},
		{"searches all empty, similar", []string{"grep:{\"pattern\":\"fooBar\"}=>", "grep:{\"pattern\":\"foo_bar\"}=>", "grep:{\"pattern\":\"fooBarr\"}=>"}, SameResult, true},
		{"summary loop", []string{"bash:ls=>a", "say:I will now refactor the parser module to split it in two.", "user:continue", "say:Next step: split the parser module into two files as planned.", "user:continue", "say:I am going to split the parser module into two separate files."}, SummaryLoop, false},
		{"monologue", []string{"bash:ls=>a", "say:I will now write the unit tests for the parser and the renderer modules.", "user:continue", "say:I will now write the unit tests for the parser and the renderer modules.", "user:continue", "say:I will now write the unit tests for the parser and the renderer modules."}, OutputRepetition, true},
		{"cycle A,B x2, B failing alike", rep(2, "bash:cat a.py=>A", "bash:python a.py=>ValueError: bad"), ToolCycle, true},
		{"cycle A,B x2, B failing differently", []string{"bash:cat a.py=>A", "bash:python a.py=>ValueError: bad", "bash:cat a.py=>A", "bash:python a.py=>KeyError: k"}, "", false},
		{"same error after its script succeeded", []string{"bash:python a.py=>ValueError: x", "bash:python a.py=>ok", "bash:python a.py --v=>ValueError: x", "bash:python a.py -q=>ValueError: x"}, "", false},
		{"same error after different edits", []string{
			`edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = load()"}=>ok`, "bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'",
			`edit_file:{"path":"b.py","old_string":"def f(a):","new_string":"def f(a, strict=False):"}=>ok`, "bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'",
			`edit_file:{"path":"c.py","old_string":"return rows","new_string":"return [r for r in rows if r]"}=>ok`, "bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'",
			`edit_file:{"path":"d.py","old_string":"import json","new_string":"import json, logging"}=>ok`, "bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'"}, "", false},
		{"same error after the same edit", []string{
			`edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = load()"}=>ok`, "bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'",
			`edit_file:{"path":"a.py","old_string":"x = 1 ","new_string":"x = load() "}=>ok`, "bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'",
			`edit_file:{"path":"a.py","old_string":"x = 1  ","new_string":"x = load()  "}=>ok`, "bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'",
			`edit_file:{"path":"a.py","old_string":"x = 1   ","new_string":"x = load()   "}=>ok`, "bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'"}, TestFixCycle, true},
		{"empty answers across new questions", []string{"say:", "user:Hello? That was empty.", "say:", "user:Please answer the question.", "say:"}, SummaryLoop, true},
		{"restored 5 times after varied attempts", []string{"bash:sed -i s/a/b/ x.py=>", "bash:python x.py=>NameError: name 'b' is not defined", "bash:git checkout x.py=>",
			"bash:sed -i s/a/c/ x.py=>", "bash:python x.py=>SyntaxError: invalid syntax", "bash:git checkout x.py=>", "bash:sed -i s/b/d/ x.py=>", "bash:python x.py=>KeyError: 'd'",
			"bash:git checkout x.py=>", "bash:sed -i s/e/f/ x.py=>", "bash:python x.py=>TypeError: f", "bash:git checkout x.py=>",
			"bash:sed -i s/g/h/ x.py=>", "bash:python x.py=>IndexError: h", "bash:git checkout x.py=>"}, EditUndo, true},
		{"restored 4 times after varied attempts", []string{"bash:sed -i s/a/b/ x.py=>", "bash:python x.py=>ok", "bash:git checkout x.py=>",
			"bash:sed -i s/a/c/ x.py=>", "bash:python x.py=>ok 2", "bash:git checkout x.py=>", "bash:sed -i s/b/d/ x.py=>", "bash:python x.py=>ok 3",
			"bash:git checkout x.py=>", "bash:sed -i s/e/f/ x.py=>", "bash:python x.py=>ok 4", "bash:git checkout x.py=>"}, "", false},
		{"notebook syntax error moving as the cell changes", []string{
			cell(`x = [1, 2\nprint(x)`, 1), cell(`x = [1, 2]\ny = {1: 2\nprint(x)`, 2), cell(`x = [1, 2]\ny = {1: 2}\nz = (3\nprint(x)`, 3)}, "", false},
		{"notebook syntax error at one line as the cell changes", []string{
			cell(`x = [1, 2\nprint(x)`, 1), cell(`x = [1, 2 \nprint(x)`, 1), cell(`x = [1,2\nprint(x)`, 1)}, ErrorCycle, true},
		{"genuine user resets", append(rep(3, "bash:git status=>clean"), "user:Thanks! Now add a README section about installation.", "bash:git status=>clean"), "", false},
		{"ignored tool", rep(5, "todo_write:{\"todos\":[1]}=>ok"), "", false},
	}
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := e.Inspect(mustParse(t, build(tt.give...)))
			if tt.want == "" {
				if v.Loop {
					t.Fatalf("Inspect = %s; want no loop", v.Summary())
				}
				return
			}
			if !v.Loop || !hasCategory(v, string(tt.want)) {
				t.Fatalf("Inspect = loop %v %v; want %s", v.Loop, v.Detections, tt.want)
			}
			if tt.strong != (v.Confidence > 0.9) {
				t.Errorf("Confidence = %.2f; want strong=%v", v.Confidence, tt.strong)
			}
			for _, d := range v.Detections {
				if d.Score > 0.9 && !d.Evidence.NoProgress && d.Category != OutputRepetition {
					t.Errorf("%s scored %.2f without no-progress evidence", d.Category, d.Score)
				}
				if d.Evidence.Count == 0 || len(d.Evidence.Steps) == 0 || d.Evidence.First > d.Evidence.Last {
					t.Errorf("%s evidence incomplete: %+v", d.Category, d.Evidence)
				}
			}
		})
	}
}

// jobStatus is a tool result long enough not to count as a short
// acknowledgement.
const jobStatus = "job 7 status\nstate: running\nshards copied: 3 of 9"

// interleave returns n copies of call, each followed by a different
// command, so that only the windowed repetition rule can count them.
func interleave(n int, call string) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, call, fmt.Sprintf("bash:ls dir%d=>file%d.go", i, i))
	}
	return out
}

// TestWaitThresholds: calls that wait repeat by design, so both repetition
// rules count them against waitFactor times the usual threshold.
func TestWaitThresholds(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want bool // want a tool_repetition detection
	}{
		{"plain call x5 in window", interleave(5, "bash:cat status=>"+jobStatus), true},
		{"sleep poll x6 in window", interleave(6, "bash:sleep 10 && cat status=>"+jobStatus), false},
		{"wait tool x6 in window", interleave(6, "wait_for_job:{\"id\":7}=>"+jobStatus), false},
		{"sleep poll x15 in window", rep(5, "bash:sleep 10 && cat status=>"+jobStatus, "bash:sleep 10 && cat status=>"+jobStatus, "bash:sleep 10 && cat status=>"+jobStatus, "bash:date=>Tue"), true},
		{"sleep poll x8 back to back", rep(8, "bash:sleep 10 && cat status=>"+jobStatus), false},
		{"sleep poll x9 back to back", rep(9, "bash:sleep 10 && cat status=>"+jobStatus), true},
	}
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := e.Inspect(mustParse(t, build(tt.give...)))
			if got := hasCategory(v, string(ToolRepetition)); got != tt.want {
				t.Errorf("Inspect = %v; want tool_repetition %v", v.Detections, tt.want)
			}
		})
	}
}

func TestScoreGrowsWithCount(t *testing.T) {
	e, _ := NewEngine(DefaultConfig())
	prev := 0.0
	for n := 3; n <= 7; n++ {
		v := e.Inspect(mustParse(t, build(rep(n, "bash:git status=>clean")...)))
		if v.Confidence <= prev && v.Confidence < 1 {
			t.Errorf("x%d Confidence = %.3f; want > %.3f", n, v.Confidence, prev)
		}
		prev = v.Confidence
	}
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
			dets = append(dets, Detection{Category: allCategories[i], Score: s, Evidence: Evidence{Tool: "t", Args: fmt.Sprint(i)}})
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
