package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/inject"
)

// codexCat is the call Codex's own loop kept making: exec_command on a
// file that is not there.
var codexCat = fakellm.ToolCall{Name: "exec_command", Arguments: `{"cmd":"cat missing_file.txt","workdir":"/repo"}`}

// codexExecResult answers an exec_command as Codex does: a chunk id and
// a wall time new on every run, then the exit status and the output. Only
// the first two lines change from run to run.
func codexExecResult(run int, output string, exit int) string {
	return fmt.Sprintf("Chunk ID: %06x\nWall time: 0.%04d seconds\nProcess exited with code %d\nOriginal token count: %d\nOutput:\n%s\n",
		(0x3fa9c1+run*104729)&0xffffff, (run*173)%10000, exit, len(output)/4+1, output)
}

// TestCodexResultFormatLoopEnds: a Responses agent that answers its calls
// in Codex's exec_command format, looping on one failing command, is
// warned, constrained and ended with LOOP_DETECTED within ten model calls,
// streamed and not; the same agent patching and testing, its outputs in
// the same format, is never touched.
func TestCodexResultFormatLoopEnds(t *testing.T) {
	for _, stream := range []bool{false, true} {
		mode := map[bool]string{true: "stream", false: "json"}[stream]
		t.Run("looping/"+mode, func(t *testing.T) {
			t.Parallel()
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{responsesModel(func(*fakellm.Request) fakellm.ResponsesAnswer {
				return fakellm.ResponsesAnswer{Calls: []fakellm.ToolCall{codexCat}}
			})}})
			lg := startLoopguard(t, fake.URL(), nil)
			runs := 0
			run := responsesAgent(t, lg.URL, agentOpts{session: "codex-format-" + mode, stream: stream, maxTurns: 12,
				result: func(toolCall) string {
					runs++
					return codexExecResult(runs, "cat: missing_file.txt: No such file or directory", 1)
				}})
			var actions []string
			for _, tr := range run.Turns {
				actions = append(actions, tr.Action)
			}
			last := run.Turns[len(run.Turns)-1]
			if len(run.Turns) > 10 || last.Action != "terminate" || !strings.HasPrefix(last.Content, inject.TerminatePrefix) {
				t.Fatalf("actions %q, last answer %q; want LOOP_DETECTED within 10 model calls", actions, last.Content)
			}
			if !strings.Contains(strings.Join(actions, ","), "warn") {
				t.Errorf("actions %q; want a warning before the end", actions)
			}
		})
		t.Run("healthy/"+mode, func(t *testing.T) {
			t.Parallel()
			// A patch, then the tests, four times: the failures go down.
			const rounds = 4
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{responsesModel(func(r *fakellm.Request) fakellm.ResponsesAnswer {
				n := strings.Count(string(r.Body), `"function_call_output"`)
				switch {
				case n >= 2*rounds:
					return fakellm.ResponsesAnswer{Text: "All tests pass."}
				case n%2 == 0:
					fix := [...][2]string{{"return a - b", "return a + b"}, {"if b = 0:", "if b == 0:"},
						{"total += x", "total += int(x)"}, {"import maths", "import math"}}[n/2]
					patch := fmt.Sprintf("*** Begin Patch\n*** Update File: src/calc.py\n@@\n-    %s\n+    %s\n*** End Patch", fix[0], fix[1])
					args, _ := json.Marshal(map[string]string{"input": patch})
					return fakellm.ResponsesAnswer{Calls: []fakellm.ToolCall{{Name: "apply_patch", Arguments: string(args)}}}
				}
				return fakellm.ResponsesAnswer{Calls: []fakellm.ToolCall{{Name: "exec_command", Arguments: `{"cmd":"pytest -q"}`}}}
			})}})
			lg := startLoopguard(t, fake.URL(), nil)
			runs := 0
			run := responsesAgent(t, lg.URL, agentOpts{session: "codex-healthy-" + mode, stream: stream, maxTurns: 12,
				result: func(c toolCall) string {
					runs++
					if c.Name == "apply_patch" {
						return codexExecResult(runs, "Success. Updated the following files:\nM src/calc.py", 0)
					}
					failed := rounds - runs/2
					if failed == 0 {
						return codexExecResult(runs, "12 passed", 0)
					}
					return codexExecResult(runs, fmt.Sprintf("%d failed, %d passed", failed, 12-failed), 1)
				}})
			ups := fake.Requests()
			if len(ups) != len(run.Turns) {
				for i, tr := range run.Turns {
					t.Logf("turn %d: %s %q %q %v", i, tr.Action, tr.Err, tr.Content, tr.Calls)
				}
				t.Fatalf("upstream got %d requests for %d turns; want all", len(ups), len(run.Turns))
			}
			for i, tr := range run.Turns {
				if tr.Action != "none" {
					t.Fatalf("turn %d: action %q (%s); want none", i, tr.Action, tr.Loop)
				}
				if string(ups[i].Body) != string(tr.Body) {
					t.Fatalf("turn %d: the upstream got other bytes than the client sent", i)
				}
			}
			if last := run.Turns[len(run.Turns)-1]; last.Content != "All tests pass." {
				t.Fatalf("last answer %q; want the model's", last.Content)
			}
		})
	}
}
