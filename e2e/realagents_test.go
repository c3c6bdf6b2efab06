package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
)

// realAgent is an agent CLI from npm, run headless under `loopguard run`
// against the fake model. Each is found through an environment variable
// naming its binary and skipped without it: the CLIs are large downloads
// that the suite does not install.
type realAgent struct {
	name string
	// env names the variable holding the binary's path.
	env string
	// args are the arguments of a headless run with prompt.
	args func(home, prompt string) []string
	// environ is what the agent needs besides the base URL (keys, homes).
	environ func(home string) []string
	// login, when set, signs the agent in inside home before it runs.
	login func(t *testing.T, home string)
	// checkCall, when set, checks each model call the upstream got.
	checkCall func(r *fakellm.Request) error
	// looping and healthy are the fake model's scripts.
	looping, healthy fakellm.Rule
	// wantPath is the upstream path of its model calls (POST).
	wantPath string
	// resolve, when set, are the hosts the agent reaches by itself, signed
	// in: it runs with no base URL, intercepted, and -resolve sends these
	// hosts to the fake.
	resolve []string
}

func realAgents() []realAgent {
	return []realAgent{{
		name: "codex",
		env:  "LOOPGUARD_E2E_CODEX",
		args: func(home, prompt string) []string {
			return []string{"exec", "--skip-git-repo-check", "--ephemeral", "-m", "fake-model", "-C", home, prompt}
		},
		environ: func(home string) []string {
			return []string{"CODEX_HOME=" + home, "OPENAI_API_KEY=" + openAIKey, "CODEX_API_KEY=" + openAIKey}
		},
		// Codex runs the command itself and answers with its own result
		// format (a new chunk id and wall time every run).
		looping: fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
			return fakellm.ResponsesAnswer{Calls: []fakellm.ToolCall{{Name: "exec_command", Arguments: `{"cmd":"cat missing_file.txt"}`}}}
		}),
		healthy: fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
			return fakellm.ResponsesAnswer{Text: "The build passes."}
		}),
		wantPath: "/v1/responses",
	}, {
		name: "claude",
		env:  "LOOPGUARD_E2E_CLAUDE",
		args: func(home, prompt string) []string {
			return []string{"-p", prompt, "--model", "claude-fake", "--max-turns", "12"}
		},
		environ: func(home string) []string {
			return []string{"HOME=" + home, "ANTHROPIC_API_KEY=" + anthropicKey, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
				"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1"}
		},
		looping: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer { return loopAnswerAnthropic }),
		healthy: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
			return fakellm.AnthropicAnswer{Text: "The build passes."}
		}),
		wantPath: "/v1/messages",
	}, {
		// Claude Code as most of its users run it: signed in with a
		// Claude.ai subscription, not an API key, and no base URL: it
		// goes to api.anthropic.com by itself, intercepted. Its OAuth
		// token reaches the host as a bearer token with the oauth beta.
		name:    "claude-subscription",
		resolve: []string{"api.anthropic.com"},
		env:     "LOOPGUARD_E2E_CLAUDE",
		args: func(home, prompt string) []string {
			return []string{"-p", prompt, "--model", "claude-fake", "--max-turns", "12"}
		},
		environ: func(home string) []string {
			return []string{"HOME=" + home, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1"}
		},
		login: claudeSubscriptionLogin,
		checkCall: func(r *fakellm.Request) error {
			if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "+claudeOAuthToken) || r.Header.Get("X-Api-Key") != "" ||
				!strings.Contains(r.Header.Get("Anthropic-Beta"), "oauth-") {
				return fmt.Errorf("Authorization %q, X-Api-Key %q, anthropic-beta %q; want the subscription's bearer token and the oauth beta",
					r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Header.Get("Anthropic-Beta"))
			}
			return nil
		},
		looping: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer { return loopAnswerAnthropic }),
		healthy: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
			return fakellm.AnthropicAnswer{Text: "The build passes."}
		}),
		wantPath: "/v1/messages",
	}, {
		name: "qwen",
		env:  "LOOPGUARD_E2E_QWEN",
		args: func(home, prompt string) []string { return []string{"-p", prompt} },
		environ: func(home string) []string {
			return []string{"HOME=" + home, "OPENAI_API_KEY=" + openAIKey, "OPENAI_MODEL=fake-model"}
		},
		looping:  agentModel(true),
		healthy:  fakellm.Rule{Response: fakellm.Response{Content: "The build passes."}},
		wantPath: "/v1/chat/completions",
	}}
}

// signedInEnv is the test's environment without what would take an agent
// off its sign-in's own route: keys, base URLs, proxies.
func signedInEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "OPENAI_API_KEY", "CODEX_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
			"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// claudeOAuthToken is the access token of the emulated Claude.ai sign-in.
const claudeOAuthToken = "sk-ant-oat01-e2e"

// claudeSubscriptionLogin signs Claude Code in with a Claude.ai
// subscription inside home, as `claude /login` leaves it on Linux: its
// OAuth tokens in ~/.claude/.credentials.json, far from expiry so that no
// refresh is tried.
func claudeSubscriptionLogin(t *testing.T, home string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"claudeAiOauth": map[string]any{
		"accessToken": claudeOAuthToken, "refreshToken": "sk-ant-ort01-e2e",
		"expiresAt": time.Now().Add(24 * time.Hour).UnixMilli(),
		"scopes":    []string{"user:inference", "user:profile", "user:sessions:claude_code"}, "subscriptionType": "max",
	}})
	dir := filepath.Join(home, ".claude")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".credentials.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// maxLoopCalls bounds the model calls a real agent's loop may take before
// LOOP_DETECTED ends it.
const maxLoopCalls = 10

// TestRunRealAgents runs real agent CLIs under `loopguard run`, healthy and
// looping: one session, the agent's own exit code, and the summary.
func TestRunRealAgents(t *testing.T) {
	var loopguard string
	for _, a := range realAgents() {
		bin := os.Getenv(a.env)
		if bin == "" {
			t.Logf("skipping %s: set %s to its binary", a.name, a.env)
			continue
		}
		if loopguard == "" {
			loopguard, _ = buildRunBinaries(t)
		}
		for _, looping := range []bool{false, true} {
			t.Run(a.name+map[bool]string{false: "/healthy", true: "/looping"}[looping], func(t *testing.T) {
				rule := a.healthy
				if looping {
					rule = a.looping
				}
				fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{rule}})
				home := t.TempDir()
				if a.login != nil {
					a.login(t, home)
				}
				jsonPath := filepath.Join(home, "summary.json")
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				args := []string{"run", "-json", jsonPath}
				env := append(os.Environ(), "OPENAI_BASE_URL="+fake.URL()+"/v1", "ANTHROPIC_BASE_URL="+fake.URL())
				if a.resolve != nil {
					for _, h := range a.resolve {
						args = append(args, "-resolve", h+"="+fake.URL())
					}
					env = signedInEnv()
				}
				args = append(append(args, "--", bin), a.args(home, "Make the build pass.")...)
				cmd := exec.CommandContext(ctx, loopguard, args...)
				cmd.WaitDelay = 10 * time.Second // the agent may outlive a killed loopguard holding the pipes
				cmd.Env = append(env, append(a.environ(home), "TMPDIR="+home)...)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				t.Logf("%s stdout:\n%s\nstderr:\n%s", a.name, &stdout, &stderr)
				if err != nil {
					t.Fatalf("loopguard run -- %s: %v", a.name, err)
				}
				var sum runSummary
				b, err := os.ReadFile(jsonPath)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &sum); err != nil {
					t.Fatal(err)
				}
				calls := 0
				for _, r := range fake.Requests() {
					if strings.Contains(r.Path, "/s/") {
						t.Fatalf("the upstream saw %s", r.Path)
					}
					if r.Method == "POST" && r.Path == a.wantPath {
						calls++
						if a.checkCall != nil {
							if err := a.checkCall(&r); err != nil {
								t.Errorf("model call %d: %v", calls, err)
							}
						}
					}
				}
				want := calls
				if looping {
					want++ // LOOP_DETECTED is loopguard's own answer
				}
				if sum.Calls != want || sum.ExitCode != 0 || sum.LoopDetected != looping {
					t.Fatalf("summary %s; want %d model calls in one session, exit code 0, LOOP_DETECTED %v", b, want, looping)
				}
				if looping && sum.Calls > maxLoopCalls {
					t.Fatalf("summary %s; want LOOP_DETECTED within %d model calls", b, maxLoopCalls)
				}
			})
		}
	}
}
