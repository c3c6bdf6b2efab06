package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/tidwall/gjson"
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
	// setup, when set, answers the agent's calls beside the model's
	// (Code Assist's loadCodeAssist), tried first.
	setup []fakellm.Rule
	// wantPath is the upstream path of its model calls (POST).
	wantPath string
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
		// Claude.ai subscription, not an API key. Its OAuth token goes to
		// the upstream as a bearer token with the oauth beta.
		name: "claude-subscription",
		env:  "LOOPGUARD_E2E_CLAUDE",
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
	}, {
		// Gemini CLI with an API key: Gemini's own API, streamed as SSE,
		// its base URL from GOOGLE_GEMINI_BASE_URL. Its own loop detection
		// is off, so that loopguard's is the one that ends the loop.
		name: "gemini",
		env:  "LOOPGUARD_E2E_GEMINI",
		args: func(home, prompt string) []string {
			return []string{"-p", prompt, "-m", "gemini-fake", "--approval-mode", "yolo"}
		},
		environ: func(home string) []string {
			return []string{"HOME=" + home, "GEMINI_API_KEY=" + geminiKey, "GEMINI_CLI_NO_RELAUNCH=true", "GEMINI_CLI_TRUST_WORKSPACE=true", "NO_COLOR=1"}
		},
		login: geminiSettings("gemini-api-key"),
		checkCall: func(r *fakellm.Request) error {
			if r.Header.Get("X-Goog-Api-Key") != geminiKey || !strings.Contains(r.RawQuery, "alt=sse") {
				return fmt.Errorf("x-goog-api-key %q, query %q; want the agent's key and alt=sse", r.Header.Get("X-Goog-Api-Key"), r.RawQuery)
			}
			return nil
		},
		looping: fakellm.GeminiRule(func(*fakellm.Request) fakellm.GeminiAnswer { return loopAnswerGemini }),
		healthy: fakellm.GeminiRule(func(*fakellm.Request) fakellm.GeminiAnswer {
			return fakellm.GeminiAnswer{Text: "The build passes."}
		}),
		wantPath: "/v1beta/models/gemini-fake:streamGenerateContent",
	}, {
		// Gemini CLI signed in with Google: Code Assist's wrapping of
		// Gemini's API, its endpoint from CODE_ASSIST_ENDPOINT, the
		// account's bearer token. The token comes as Cloud Shell hands it
		// over (GOOGLE_GENAI_USE_GCA, GOOGLE_CLOUD_ACCESS_TOKEN): cached
		// OAuth credentials would first be checked at
		// oauth2.googleapis.com/tokeninfo, which a test cannot reach.
		name: "gemini-google",
		env:  "LOOPGUARD_E2E_GEMINI",
		args: func(home, prompt string) []string {
			return []string{"-p", prompt, "-m", "gemini-fake", "--approval-mode", "yolo"}
		},
		environ: func(home string) []string {
			return []string{"HOME=" + home, "GOOGLE_GENAI_USE_GCA=true", "GOOGLE_CLOUD_ACCESS_TOKEN=" + googleToken,
				"GEMINI_CLI_NO_RELAUNCH=true", "GEMINI_CLI_TRUST_WORKSPACE=true", "NO_COLOR=1"}
		},
		login: geminiSettings("oauth-personal"),
		checkCall: func(r *fakellm.Request) error {
			if r.Header.Get("Authorization") != "Bearer "+googleToken || !strings.Contains(r.RawQuery, "alt=sse") ||
				gjson.GetBytes(r.Body, "project").String() != "e2e-project" {
				return fmt.Errorf("Authorization %q, query %q, project %s; want the account's token, alt=sse and the Code Assist project",
					r.Header.Get("Authorization"), r.RawQuery, gjson.GetBytes(r.Body, "project").Raw)
			}
			return nil
		},
		setup:   codeAssistSetup,
		looping: fakellm.GeminiRule(func(*fakellm.Request) fakellm.GeminiAnswer { return loopAnswerGemini }),
		healthy: fakellm.GeminiRule(func(*fakellm.Request) fakellm.GeminiAnswer {
			return fakellm.GeminiAnswer{Text: "The build passes."}
		}),
		wantPath: "/v1internal:streamGenerateContent",
	}}
}

// googleToken is the access token of the emulated Google sign-in.
const googleToken = "ya29.e2e"

// codeAssistSetup answers Code Assist's calls beside the model's: the
// account's tier and project (loadCodeAssist), and an empty object for the
// others (quota, experiments, metrics).
var codeAssistSetup = []fakellm.Rule{{
	Match: func(r *fakellm.Request) bool { return strings.HasSuffix(r.Path, "/v1internal:loadCodeAssist") },
	Response: fakellm.Response{Raw: []byte(`{"currentTier":{"id":"standard-tier","name":"Gemini Code Assist","hasOnboardedPreviously":true},` +
		`"cloudaicompanionProject":"e2e-project"}`), Header: http.Header{"Content-Type": {"application/json"}}},
}, {
	Match: func(r *fakellm.Request) bool {
		return strings.Contains(r.Path, "/v1internal:") && r.API() == ""
	},
	Response: fakellm.Response{Raw: []byte(`{}`), Header: http.Header{"Content-Type": {"application/json"}}},
}}

// geminiKey is Gemini CLI's API key in the e2e runs.
const geminiKey = "AIza-e2e"

// loopAnswerGemini is a model that runs the same failing command forever.
var loopAnswerGemini = fakellm.GeminiAnswer{Calls: []fakellm.ToolCall{{Name: "run_shell_command", Arguments: `{"command":"cat missing_file.txt"}`}}}

// geminiSettings writes Gemini CLI's settings inside home: the sign-in
// chosen (auth), its own loop detection, usage statistics and update
// checks off.
func geminiSettings(auth string) func(t *testing.T, home string) {
	return func(t *testing.T, home string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{
			"security": map[string]any{"auth": map[string]any{"selectedType": auth}},
			"model":    map[string]any{"disableLoopDetection": true},
			"privacy":  map[string]any{"usageStatisticsEnabled": false},
			"general":  map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true},
		})
		dir := filepath.Join(home, ".gemini")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "settings.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
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
				fake := fakellm.Start(t, fakellm.Script{Rules: append(append([]fakellm.Rule(nil), a.setup...), rule)})
				home := t.TempDir()
				if a.login != nil {
					a.login(t, home)
				}
				jsonPath := filepath.Join(home, "summary.json")
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				args := append([]string{"run", "-json", jsonPath, "--", bin}, a.args(home, "Make the build pass.")...)
				cmd := exec.CommandContext(ctx, loopguard, args...)
				cmd.WaitDelay = 10 * time.Second // the agent may outlive a killed loopguard holding the pipes
				cmd.Env = append(os.Environ(), append(a.environ(home),
					"OPENAI_BASE_URL="+fake.URL()+"/v1", "ANTHROPIC_BASE_URL="+fake.URL(), "GOOGLE_GEMINI_BASE_URL="+fake.URL(),
					"CODE_ASSIST_ENDPOINT="+fake.URL(), "TMPDIR="+home)...)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				t.Logf("%s stdout:\n%s\nstderr:\n%s", a.name, &stdout, &stderr)
				if err != nil || t.Failed() {
					for _, x := range fake.Exchanges() {
						t.Logf("upstream got %s %s?%s: %d, %d bytes answered", x.Request.Method, x.Request.Path, x.Request.RawQuery, x.Status, len(x.Body))
					}
					logs, _ := filepath.Glob(filepath.Join(home, "loopguard-*.log"))
					for _, l := range logs {
						b, _ := os.ReadFile(l)
						t.Logf("%s:\n%s", l, b[max(0, len(b)-6000):])
					}
				}
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
