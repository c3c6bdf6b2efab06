package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/tidwall/gjson"
)

// buildRunBinaries builds loopguard and the runagent test agent into dir.
func buildRunBinaries(t *testing.T) (loopguard, agent string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds loopguard and runs agents as processes: skipped under -short")
	}
	dir := t.TempDir()
	loopguard, agent = filepath.Join(dir, "loopguard"), filepath.Join(dir, "runagent")
	for _, b := range []struct{ out, pkg string }{{loopguard, ".."}, {agent, "./testdata/runagent"}} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return loopguard, agent
}

// agentModel answers the runagent's chat requests: healthy, it runs three
// different commands and then answers; looping, it runs `make build`
// forever, which fails the same way every time.
func agentModel(looping bool) fakellm.Rule {
	return fakellm.Rule{Respond: func(r *fakellm.Request) fakellm.Response {
		n := 0
		gjson.GetBytes(r.Body, "messages").ForEach(func(_, m gjson.Result) bool {
			if m.Get("role").String() == "assistant" {
				n++
			}
			return true
		})
		switch {
		case looping:
			return fakellm.Response{ToolCalls: []fakellm.ToolCall{{Name: "bash", Arguments: `{"command":"make build"}`}}}
		case n < 3:
			return fakellm.Response{ToolCalls: []fakellm.ToolCall{{Name: "bash", Arguments: fmt.Sprintf(`{"command":"step %d"}`, n)}}}
		}
		return fakellm.Response{Content: "All done."}
	}}
}

// runSummary is the part of `loopguard run -json` the tests read.
type runSummary struct {
	Session  string `json:"session"`
	ExitCode int    `json:"exit_code"`
	Calls    int    `json:"model_calls"`
	Answered int    `json:"answered"`
	Loops    []struct {
		Turn     int    `json:"turn"`
		Category string `json:"category"`
		Action   string `json:"action"`
	} `json:"loops"`
	Detections    int                         `json:"detections"`
	Interventions int                         `json:"interventions"`
	LoopDetected  bool                        `json:"ended_with_loop_detected"`
	Tokens        struct{ Input, Output int } `json:"tokens"`
	LoopTokens    struct{ Input, Output int } `json:"loop_tokens"`
	Timeline      string                      `json:"timeline"`
	Log           string                      `json:"log"`
}

// TestRunGuardsOneAgentRun runs a real child process under `loopguard run`,
// healthy and looping: the run is one session, the agent's output and exit
// code are its own, no session prefix reaches the upstream, and the summary
// tells what happened.
func TestRunGuardsOneAgentRun(t *testing.T) {
	loopguard, agent := buildRunBinaries(t)
	tests := []struct {
		name    string
		looping bool
		exit    int
		session string
	}{
		{name: "healthy", exit: 7},
		{name: "looping", looping: true, exit: 0, session: "e2e-loop-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{agentModel(tt.looping)}})
			dir := t.TempDir()
			jsonPath := filepath.Join(dir, "summary.json")
			args := []string{"run", "-json", jsonPath}
			if tt.session != "" {
				args = append(args, "-session", tt.session)
			}
			args = append(args, "--", agent, "-exit", fmt.Sprint(tt.exit))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, loopguard, args...)
			// The upstream is what OPENAI_BASE_URL held; TMPDIR keeps the
			// log and timeline in the test's directory.
			cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+fake.URL()+"/v1", "OPENAI_API_KEY=sk-e2e", "TMPDIR="+dir)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			code := 0
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.exit {
				t.Fatalf("exit code %d; want the agent's %d\nstdout:\n%s\nstderr:\n%s", code, tt.exit, &stdout, &stderr)
			}

			var sum runSummary
			b, err := os.ReadFile(jsonPath)
			if err != nil {
				t.Fatalf("-json file: %v\nstderr:\n%s", err, &stderr)
			}
			if err := json.Unmarshal(b, &sum); err != nil {
				t.Fatal(err)
			}
			out := stdout.String()
			// The agent's own stdout, nothing of loopguard's in it.
			if strings.Contains(out, "loopguard") || !strings.HasPrefix(out, "turn 1: bash") {
				t.Fatalf("agent stdout holds loopguard's lines or misses its own:\n%s", out)
			}
			if !strings.Contains(out, fmt.Sprintf("calls: %d\nsessions: %s\n", sum.Calls, sum.Session)) {
				t.Fatalf("agent saw other than %d calls in the one session %s:\n%s\nstderr:\n%s", sum.Calls, sum.Session, out, &stderr)
			}
			if tt.session != "" && sum.Session != tt.session {
				t.Fatalf("session %q; want -session's %q", sum.Session, tt.session)
			}
			if sum.ExitCode != tt.exit || sum.Tokens.Input == 0 || sum.Tokens.Output == 0 {
				t.Fatalf("summary %s; want exit code %d and the tokens the upstream reported", b, tt.exit)
			}
			for _, r := range fake.Requests() {
				if strings.Contains(r.Path, "/s/") || r.Path != "/v1/chat/completions" {
					t.Fatalf("the upstream saw %s; want /v1/chat/completions", r.Path)
				}
			}
			errText := stderr.String()
			if !strings.Contains(errText, "log: "+sum.Log+"\n") || !strings.Contains(errText, "timeline: "+sum.Timeline+"\n") {
				t.Fatalf("stderr misses the log path or the timeline command:\n%s", errText)
			}
			if _, err := os.Stat(sum.Log); err != nil {
				t.Fatalf("log: %v", err)
			}

			if !tt.looping {
				if !strings.Contains(out, "final: All done.") || sum.Calls != 4 || len(sum.Loops) != 0 || sum.LoopDetected ||
					sum.LoopTokens.Input != 0 || len(fake.Requests()) != 4 {
					t.Fatalf("healthy run: summary %s, %d upstream requests; want 4 calls, no loop\nstdout:\n%s", b, len(fake.Requests()), out)
				}
				if !strings.Contains(errText, "no loop seen") {
					t.Fatalf("stderr summary:\n%s", errText)
				}
				return
			}
			var actions []string
			for _, l := range sum.Loops {
				actions = append(actions, l.Action)
				if l.Category != "tool_repetition" && l.Category != "error_cycle" && l.Category != "same_result" {
					t.Errorf("loop category %q", l.Category)
				}
			}
			if got := strings.Join(actions, ","); got != "warn,constrain,terminate" || !sum.LoopDetected ||
				!strings.Contains(out, "final: LOOP_DETECTED") {
				t.Fatalf("looping run: actions %s, ended with LOOP_DETECTED %v; want warn,constrain,terminate and true\nstdout:\n%s",
					got, sum.LoopDetected, out)
			}
			// Every call but the last reached the upstream; the warned and
			// constrained ones were spent in the loop.
			if len(fake.Requests()) != sum.Calls-1 || sum.LoopTokens.Input == 0 || sum.LoopTokens.Input >= sum.Tokens.Input {
				t.Fatalf("looping run: %d upstream requests, summary %s; want %d, and loop tokens a part of the tokens", len(fake.Requests()), b, sum.Calls-1)
			}
			if !strings.Contains(errText, "the run was ended with LOOP_DETECTED") {
				t.Fatalf("stderr summary:\n%s", errText)
			}
		})
	}
}

// TestRunForwardsSignals: SIGTERM and SIGINT sent to loopguard reach the
// agent, whose death by that signal is the exit code (128+n), and the
// summary is still printed.
func TestRunForwardsSignals(t *testing.T) {
	loopguard, agent := buildRunBinaries(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd, stderr := startRunUntil(ctx, t, loopguard, []string{"TMPDIR=" + t.TempDir()}, "waiting",
				"-upstream", "http://127.0.0.1:1", "--", agent, "-wait")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 128+int(sig) {
				t.Fatalf("loopguard run ended with %v; want exit code %d\nstderr:\n%s", err, 128+int(sig), stderr)
			}
			if !strings.Contains(stderr.String(), "0 model calls, exit code "+fmt.Sprint(128+int(sig))) {
				t.Fatalf("stderr misses the summary:\n%s", stderr)
			}
		})
	}
}

// TestRunTwoUpstreams: an agent whose OpenAI-style and Anthropic endpoints
// live on two hosts keeps both behind `loopguard run`: each wire API's
// requests reach the upstream its variable held before, in one session.
func TestRunTwoUpstreams(t *testing.T) {
	loopguard, agent := buildRunBinaries(t)
	openai, anthropic := twoFakes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, loopguard, "run", "-session", "two-1", "--", agent, "-both")
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir(),
		"OPENAI_BASE_URL="+openai.URL()+"/v1", "ANTHROPIC_BASE_URL="+anthropic.URL())
	stderr := runBoth(t, cmd, "two-1", openai, anthropic)
	if !strings.Contains(stderr, "2 model calls") {
		t.Fatalf("stderr summary:\n%s", stderr)
	}
}

// twoFakes starts an OpenAI-style and an Anthropic fake, each answering "hi".
func twoFakes(t *testing.T) (openai, anthropic *fakellm.Server) {
	t.Helper()
	openai = fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{{Response: fakellm.Response{Content: "hi"}}}})
	anthropic = fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
		fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer { return fakellm.AnthropicAnswer{Text: "hi"} })}})
	return openai, anthropic
}

// runBoth runs cmd, the test agent with -both under loopguard run as
// session, and checks that each fake got its one call; it returns
// loopguard's stderr.
func runBoth(t *testing.T, cmd *exec.Cmd, session string, openai, anthropic *fakellm.Server) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("loopguard run: %v\nstderr:\n%s", err, &stderr)
	}
	if got := stdout.String(); got != "status: 200\nstatus: 200\ncalls: 2\nsessions: "+session+"\n" {
		t.Fatalf("agent output:\n%s\nstderr:\n%s", got, &stderr)
	}
	for _, tt := range []struct {
		fake *fakellm.Server
		want string
	}{{openai, "/v1/chat/completions"}, {anthropic, "/v1/messages"}} {
		reqs := tt.fake.Requests()
		if len(reqs) != 1 || reqs[0].Path != tt.want {
			t.Fatalf("upstream %s saw %d requests (%v); want one %s\nstderr:\n%s", tt.fake.URL(), len(reqs), reqs, tt.want, &stderr)
		}
	}
	return stderr.String()
}

// TestRunWithRunningProxy: -proxy uses a loopguard already serving (for
// teams); the run is one session there, and the timeline command reads it.
func TestRunWithRunningProxy(t *testing.T) {
	loopguard, agent := buildRunBinaries(t)
	fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{agentModel(true)}})
	base := serveLoopguard(t, loopguard, fake.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, loopguard, "run", "-proxy", base+"/v1", "-session", "team-run-1", "--", agent)
	// The variables point elsewhere: with -proxy they are only replaced.
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir(), "OPENAI_BASE_URL=http://127.0.0.1:1/v1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("loopguard run: %v\nstderr:\n%s", err, &stderr)
	}
	if !strings.Contains(stdout.String(), "calls: 6\nsessions: team-run-1\n") {
		t.Fatalf("agent output:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	want := "timeline: curl -s " + base + "/loopguard/api/sessions/team-run-1\n"
	if e := stderr.String(); !strings.Contains(e, "6 model calls") || !strings.Contains(e, "ended with LOOP_DETECTED") || !strings.Contains(e, want) {
		t.Fatalf("stderr summary:\n%s\nwant %q", e, want)
	}
	if n := len(fake.Requests()); n != 5 {
		t.Fatalf("the upstream saw %d requests; want 5 (the sixth was answered LOOP_DETECTED)", n)
	}
}

// serveLoopguard runs `loopguard -upstream upstream` as its own process on a
// free loopback port until the test ends, and returns its base URL.
func serveLoopguard(t *testing.T, loopguard, upstream string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(loopguard, "-listen", addr, "-upstream", upstream, "-log-level", "warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	base := "http://" + addr
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("loopguard did not come up on %s: %v", addr, err)
		}
	}
}

// TestRunInterruptMidStream: a Ctrl-C (SIGINT) in the middle of a streamed
// answer ends the agent with it, loopguard closes the upstream stream (the
// model stops generating), shuts down and still writes its log and summary.
func TestRunInterruptMidStream(t *testing.T) {
	loopguard, agent := buildRunBinaries(t)
	fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{{Response: fakellm.Response{Content: "tick ", NeverEnd: true, Delay: 5 * time.Millisecond}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := startRunUntil(ctx, t, loopguard, []string{"TMPDIR=" + t.TempDir(), "OPENAI_BASE_URL=" + fake.URL() + "/v1"},
		"streaming", "--", agent, "-stream")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("loopguard run ended with %v; want the agent's death by SIGINT, 130\nstderr:\n%s", err, stderr)
	}
	e := stderr.String()
	// The interrupted call is counted answered once its end is recorded,
	// which may come after the summary is written: either is right.
	if !regexp.MustCompile(`1 model calls( \(1 answered\))?, exit code 130`).MatchString(e) {
		t.Fatalf("stderr misses the summary:\n%s", e)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if xs := fake.Exchanges(); len(xs) == 1 && xs[0].PeerClosed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the upstream stream was not closed")
		}
	}
	_, logPath, _ := strings.Cut(e, "log: ")
	logPath, _, _ = strings.Cut(logPath, "\n")
	b, err := os.ReadFile(logPath)
	if err != nil || !bytes.Contains(b, []byte(`"exit_code":130`)) || !bytes.Contains(b, []byte(`"path":"/v1/chat/completions"`)) {
		t.Fatalf("log %s (%v) misses the request or the command's end:\n%s", logPath, err, b)
	}
}

// startRunUntil starts `loopguard run args...` with env added to the
// environment and waits until the agent's first line on stdout is want.
// The agent's later output is not read.
func startRunUntil(ctx context.Context, t *testing.T, loopguard string, env []string, want string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, loopguard, append([]string{"run"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second // the agent may outlive a killed loopguard holding the pipes
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != want+"\n" {
		t.Fatalf("agent said %q, %v; want %s", line, err, want)
	}
	return cmd, stderr
}

// TestRunResolve: with no base URL set, an agent's calls to the vendors'
// hosts reach where -resolve sends them, and are guarded in the run's
// session, whichever way they came: intercepted (Go's client trusts the
// run's CA through SSL_CERT_FILE and goes through HTTPS_PROXY), or, with
// -intercept=false, through the base URLs to the upstreams loopguard chose
// (the vendors' APIs), which -resolve sends there too.
func TestRunResolve(t *testing.T) {
	loopguard, agent := buildRunBinaries(t)
	for _, intercepting := range []bool{true, false} {
		t.Run(fmt.Sprintf("intercept=%v", intercepting), func(t *testing.T) {
			openai, anthropic := twoFakes(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, loopguard, "run", fmt.Sprintf("-intercept=%v", intercepting), "-session", "resolve-1",
				"-resolve", "api.openai.com="+openai.URL(), "-resolve", "api.anthropic.com="+anthropic.URL(), "--", agent, "-both")
			cmd.Env = append(signedInEnv(), "TMPDIR="+t.TempDir(), "OPENAI_API_KEY=sk-e2e")
			stderr := runBoth(t, cmd, "resolve-1", openai, anthropic)
			if !strings.Contains(stderr, "session resolve-1: 2 model calls (2 answered)") {
				t.Fatalf("stderr summary:\n%s", stderr)
			}
		})
	}
}
