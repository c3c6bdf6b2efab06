package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
)

// codexSocketRun is one headless Codex run under `loopguard run` against
// fake: its summary, and how long from the start until the fake saw its
// first model call.
func codexSocketRun(t *testing.T, loopguard, bin string, fake *fakellm.Server) (runSummary, time.Duration) {
	t.Helper()
	home := t.TempDir()
	jsonPath := filepath.Join(home, "summary.json")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, loopguard, "run", "-json", jsonPath, "--", bin,
		"exec", "--skip-git-repo-check", "--ephemeral", "-m", "fake-model", "-C", home, "Make the build pass.")
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), "CODEX_HOME="+home, "OPENAI_API_KEY="+openAIKey, "CODEX_API_KEY="+openAIKey,
		"OPENAI_BASE_URL="+fake.URL()+"/v1", "TMPDIR="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if t.Failed() || err != nil {
		t.Logf("codex stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	if err != nil {
		t.Fatalf("loopguard run -- codex: %v", err)
	}
	var sum runSummary
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	var first time.Duration
	for _, r := range fake.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/responses") {
			first = r.Received.Sub(start)
			break
		}
	}
	return sum, first
}

// TestRunCodexOverSocket: the real Codex CLI under `loopguard run` uses the
// Responses WebSocket through loopguard at once (no upgrade retries, no
// POST), a healthy run is untouched and a looping one ends with
// LOOP_DETECTED on the socket. The time to Codex's first model call is
// logged beside the same run whose upgrades are refused (its fallback to
// HTTP after retries).
func TestRunCodexOverSocket(t *testing.T) {
	bin := os.Getenv("LOOPGUARD_E2E_CODEX")
	if bin == "" {
		t.Skip("set LOOPGUARD_E2E_CODEX to the Codex CLI's binary (npm @openai/codex)")
	}
	loopguard, _ := buildRunBinaries(t)
	for _, looping := range []bool{false, true} {
		t.Run(map[bool]string{false: "healthy", true: "looping"}[looping], func(t *testing.T) {
			answer := fakellm.ResponsesAnswer{Text: "The build passes."}
			if looping {
				answer = fakellm.ResponsesAnswer{Calls: []fakellm.ToolCall{{Name: "exec_command", Arguments: `{"cmd":"cat missing_file.txt"}`}}}
			}
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
				fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return answer }),
			}})
			sum, first := codexSocketRun(t, loopguard, bin, fake)
			upgrades, turns, posts := 0, 0, 0
			for _, x := range fake.Exchanges() {
				r := x.Request
				switch {
				case r.Method == http.MethodGet && r.Path == "/v1/responses":
					upgrades++
					if x.Status != http.StatusSwitchingProtocols {
						t.Errorf("upgrade answered %d", x.Status)
					}
				case r.Socket:
					turns++
					if r.Path != "/v1/responses" {
						t.Errorf("socket turn on %s", r.Path)
					}
				case r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/responses"):
					posts++
				}
			}
			t.Logf("Codex over the socket: %d upgrade(s), %d socket turn(s), %d POST(s); first model call %v after start; summary: %d calls, loop %v",
				upgrades, turns, posts, first.Round(time.Millisecond), sum.Calls, sum.LoopDetected)
			if upgrades == 0 || turns == 0 || posts != 0 {
				t.Fatalf("%d upgrades, %d socket turns, %d POSTs; want Codex on the socket only", upgrades, turns, posts)
			}
			if upgrades > 2 {
				t.Errorf("%d upgrades; want no retries", upgrades)
			}
			want := turns
			if looping {
				want++ // LOOP_DETECTED is loopguard's own answer, on the socket
			}
			if sum.Calls != want || sum.ExitCode != 0 || sum.LoopDetected != looping {
				t.Fatalf("summary: %d calls, exit %d, LOOP_DETECTED %v; want %d calls, exit 0, LOOP_DETECTED %v",
					sum.Calls, sum.ExitCode, sum.LoopDetected, want, looping)
			}
			if looping && sum.Calls > maxLoopCalls {
				t.Fatalf("%d model calls; want LOOP_DETECTED within %d", sum.Calls, maxLoopCalls)
			}
			if !looping && len(sum.Loops) != 0 {
				t.Fatalf("a healthy run got loop actions: %+v", sum.Loops)
			}
		})
	}
	if os.Getenv("LOOPGUARD_E2E_CODEX_FALLBACK") != "" {
		// The cost the socket saves: an upstream that answers the upgrade
		// as a plain request (as loopguard did before it relayed sockets)
		// gets Codex's retries before HTTP.
		t.Run("refused", func(t *testing.T) {
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
				{Match: func(r *fakellm.Request) bool {
					return r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/responses")
				},
					Response: fakellm.Response{Raw: []byte(`{"error":{"message":"not found"}}`), Status: http.StatusNotFound}},
				fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
					return fakellm.ResponsesAnswer{Text: "The build passes."}
				}),
			}})
			_, first := codexSocketRun(t, loopguard, bin, fake)
			t.Logf("Codex refused the socket: first model call %v after start", first.Round(time.Millisecond))
		})
	}
}
