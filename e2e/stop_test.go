package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
)

// stopSummary is the part of `loopguard run -json` that says how a run
// ended.
type stopSummary struct {
	ExitCode     int    `json:"exit_code"`
	Calls        int    `json:"model_calls"`
	StoppedBy    string `json:"stopped_by"`
	LoopDetected bool   `json:"ended_with_loop_detected"`
	Budget       *struct {
		Kind     string `json:"kind"`
		Exceeded bool   `json:"exceeded"`
	} `json:"budget"`
}

// runStopped runs `loopguard run args -- command` against upstream and
// returns its exit code and summary.
func runStopped(t *testing.T, loopguard, upstream string, extraEnv, args, command []string) (int, stopSummary, string) {
	t.Helper()
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "summary.json")
	full := append(append([]string{"run", "-json", jsonPath}, args...), "--")
	full = append(full, command...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, loopguard, full...)
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), append(extraEnv,
		"OPENAI_BASE_URL="+upstream+"/v1", "ANTHROPIC_BASE_URL="+upstream, "OPENAI_API_KEY="+openAIKey, "TMPDIR="+dir)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var sum stopSummary
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatalf("-json file: %v\nstderr:\n%s", err, &stderr)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	return code, sum, fmt.Sprintf("summary %s\nstdout:\n%s\nstderr:\n%s", b, &stdout, &stderr)
}

// TestRunExitOnStop: `loopguard run` keeps the agent's exit code when
// loopguard ended the run, unless -exit-on-stop (or [run] exit_on_stop)
// asks for loopguard's own: 90 for LOOP_DETECTED, 91 for BUDGET_EXCEEDED;
// the summary's stopped_by says which either way, and a run the agent
// ended itself keeps its code under the option.
func TestRunExitOnStop(t *testing.T) {
	loopguard, agent := buildRunBinaries(t)
	onConfig := filepath.Join(t.TempDir(), "exit.toml")
	if err := os.WriteFile(onConfig, []byte("[run]\nexit_on_stop = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		looping   bool
		args      []string
		wantCode  int
		stoppedBy string
		budget    string // the budget kind that ended the run
	}{
		{name: "loop, agent's code", looping: true, wantCode: 3, stoppedBy: "loop"},
		{name: "loop, -exit-on-stop", looping: true, args: []string{"-exit-on-stop"}, wantCode: 90, stoppedBy: "loop"},
		{name: "loop, exit_on_stop in the config", looping: true, args: []string{"-config", onConfig}, wantCode: 90, stoppedBy: "loop"},
		{name: "turn budget, agent's code", args: []string{"-max-turns", "2"}, wantCode: 3, stoppedBy: "budget", budget: "turns"},
		{name: "turn budget, -exit-on-stop", args: []string{"-max-turns", "2", "-exit-on-stop"}, wantCode: 91, stoppedBy: "budget", budget: "turns"},
		{name: "token budget, -exit-on-stop", args: []string{"-max-tokens", "1", "-exit-on-stop"}, wantCode: 91, stoppedBy: "budget", budget: "tokens"},
		{name: "healthy, -exit-on-stop", args: []string{"-exit-on-stop", "-max-turns", "100"}, wantCode: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{agentModel(tt.looping)}})
			code, sum, out := runStopped(t, loopguard, fake.URL(), nil, tt.args, []string{agent, "-exit", "3"})
			if code != tt.wantCode || sum.ExitCode != 3 || sum.StoppedBy != tt.stoppedBy || sum.LoopDetected != (tt.stoppedBy == "loop") {
				t.Fatalf("exit code %d, summary exit code %d stopped_by %q; want %d, 3, %q\n%s", code, sum.ExitCode, sum.StoppedBy,
					tt.wantCode, tt.stoppedBy, out)
			}
			if tt.budget != "" && (sum.Budget == nil || sum.Budget.Kind != tt.budget || !sum.Budget.Exceeded) {
				t.Fatalf("budget %+v; want %s exceeded\n%s", sum.Budget, tt.budget, out)
			}
			if tt.stoppedBy == "budget" && !strings.Contains(out, "final: BUDGET_EXCEEDED:") {
				t.Fatalf("the agent did not get BUDGET_EXCEEDED as its final answer\n%s", out)
			}
		})
	}
}

// TestRunRealAgentsStop runs each real agent CLI (see realAgents) under
// `loopguard run`, ended by each of loopguard's stops, with and without
// -exit-on-stop: the agents exit 0 on loopguard's answer, which a pipeline
// sees only with the option.
func TestRunRealAgentsStop(t *testing.T) {
	var loopguard string
	for _, a := range realAgents() {
		bin := os.Getenv(a.env)
		if bin == "" {
			t.Logf("skipping %s: set %s to its binary", a.name, a.env)
			continue
		}
		if a.login != nil || a.resolve != nil {
			continue // the same binary as another entry; its sign-in or route changes no stop
		}
		if loopguard == "" {
			loopguard, _ = buildRunBinaries(t)
		}
		for _, stop := range []string{"loop", "budget"} {
			for _, exitOnStop := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/exit-on-stop=%v", a.name, stop, exitOnStop), func(t *testing.T) {
					fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{a.looping}})
					home := t.TempDir()
					var args []string
					want := 0
					if stop == "budget" {
						// Two calls go through; the third, before the loop's
						// ladder could end it, is over the budget.
						args = append(args, "-max-turns", "2")
					}
					if exitOnStop {
						args = append(args, "-exit-on-stop")
						want = map[string]int{"loop": 90, "budget": 91}[stop]
					}
					command := append([]string{bin}, a.args(home, "Make the build pass.")...)
					code, sum, out := runStopped(t, loopguard, fake.URL(), a.environ(home), args, command)
					if code != want || sum.ExitCode != 0 || sum.StoppedBy != stop {
						t.Fatalf("exit code %d, agent's %d, stopped_by %q; want %d, 0, %q\n%s", code, sum.ExitCode, sum.StoppedBy, want, stop, out)
					}
					if stop == "budget" && sum.Calls != 3 {
						t.Fatalf("%d model calls; want 2 forwarded and the one answered BUDGET_EXCEEDED\n%s", sum.Calls, out)
					}
				})
			}
		}
	}
}
