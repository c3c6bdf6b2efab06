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
	// wantPath is the upstream path of its model calls (POST); alsoPath,
	// when set, another (an agent that speaks two APIs).
	wantPath, alsoPath string
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
			return fakellm.ResponsesAnswer{Text: healthyAnswer}
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
			return fakellm.AnthropicAnswer{Text: healthyAnswer}
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
		login:     claudeSubscriptionLogin,
		checkCall: claudeSubscriptionCall,
		looping:   fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer { return loopAnswerAnthropic }),
		healthy: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
			return fakellm.AnthropicAnswer{Text: healthyAnswer}
		}),
		wantPath: "/v1/messages",
	}, {
		// opencode signed in with ChatGPT Plus/Pro: no setting moves its
		// calls off chatgpt.com, so only interception guards it.
		name:    "opencode-chatgpt",
		env:     "LOOPGUARD_E2E_OPENCODE",
		resolve: []string{"chatgpt.com"},
		args: func(home, prompt string) []string {
			return []string{"run", "-m", "openai/gpt-5.4", prompt}
		},
		environ: func(home string) []string {
			return []string{"HOME=" + home, "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1"}
		},
		login:     opencodeChatGPTLogin,
		checkCall: chatgptCall(chatgptAccess),
		looping:   fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return loopAnswerResponses }),
		healthy: fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
			return fakellm.ResponsesAnswer{Text: healthyAnswer}
		}),
		wantPath: "/backend-api/codex/responses",
	}, {
		// opencode signed in with GitHub Copilot: its GitHub token goes to
		// api.githubcopilot.com as a bearer token, which only
		// interception guards (a base URL would send it elsewhere).
		name:    "opencode-copilot",
		env:     "LOOPGUARD_E2E_OPENCODE",
		resolve: []string{"api.githubcopilot.com"},
		args: func(home, prompt string) []string {
			return []string{"run", "-m", "github-copilot/gpt-5-mini", prompt}
		},
		environ: func(home string) []string {
			return []string{"HOME=" + home, "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1"}
		},
		login: func(t *testing.T, home string) {
			writeJSON(t, home, ".local/share/opencode/auth.json", map[string]any{"github-copilot": map[string]any{
				"type": "oauth", "refresh": copilotToken, "access": copilotToken, "expires": 0}})
		},
		checkCall: func(r *fakellm.Request) error {
			if r.Header.Get("Authorization") != "Bearer "+copilotToken {
				return fmt.Errorf("Authorization %q; want the Copilot sign-in's token", r.Header.Get("Authorization"))
			}
			return nil
		},
		// Its GPT-5 models answer on /responses, its title on
		// /chat/completions.
		looping: apiByPath(agentModel(true),
			fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return loopAnswerResponses })),
		healthy: apiByPath(fakellm.Rule{Response: fakellm.Response{Content: healthyAnswer}},
			fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
				return fakellm.ResponsesAnswer{Text: healthyAnswer}
			})),
		wantPath: "/chat/completions",
		alsoPath: "/responses",
	}, {
		// opencode with no sign-in: its default free model (big-pickle)
		// on OpenCode Zen, reached by itself at opencode.ai with Zen's
		// public key.
		name:    "opencode-zen",
		env:     "LOOPGUARD_E2E_OPENCODE",
		resolve: []string{"opencode.ai"},
		args:    func(home, prompt string) []string { return []string{"run", prompt} },
		environ: func(home string) []string {
			return []string{"HOME=" + home, "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1"}
		},
		checkCall: func(r *fakellm.Request) error {
			if r.Header.Get("Authorization") != "Bearer public" {
				return fmt.Errorf("Authorization %q; want Zen's public key", r.Header.Get("Authorization"))
			}
			return nil
		},
		looping:  agentModel(true),
		healthy:  fakellm.Rule{Response: fakellm.Response{Content: healthyAnswer}},
		wantPath: "/zen/v1/chat/completions",
	}, {
		// pi signed in with Claude Pro/Max: it passes its own base URL to
		// its Anthropic client, so only interception guards it.
		name:    "pi-claude",
		env:     "LOOPGUARD_E2E_PI",
		resolve: []string{"api.anthropic.com"},
		args: func(home, prompt string) []string {
			return []string{"-p", "--no-session", "--offline", "--provider", "anthropic", "--model", "claude-sonnet-4-5", prompt}
		},
		environ: func(home string) []string { return []string{"HOME=" + home} },
		login: func(t *testing.T, home string) {
			writeJSON(t, home, ".pi/agent/auth.json", map[string]any{"anthropic": map[string]any{
				"type": "oauth", "access": claudeOAuthToken, "refresh": "sk-ant-ort01-e2e",
				"expires": time.Now().Add(24 * time.Hour).UnixMilli()}})
		},
		checkCall: claudeSubscriptionCall,
		looping:   fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer { return loopAnswerAnthropic }),
		healthy: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
			return fakellm.AnthropicAnswer{Text: healthyAnswer}
		}),
		wantPath: "/v1/messages",
	}, {
		// pi signed in with ChatGPT: its Responses WebSocket (then SSE)
		// on chatgpt.com, whose path no base URL of pi's reaches.
		name:    "pi-chatgpt",
		env:     "LOOPGUARD_E2E_PI",
		resolve: []string{"chatgpt.com"},
		args: func(home, prompt string) []string {
			return []string{"-p", "--no-session", "--offline", "--provider", "openai-codex", "--model", "gpt-5.4", prompt}
		},
		environ: func(home string) []string { return []string{"HOME=" + home} },
		login: func(t *testing.T, home string) {
			writeJSON(t, home, ".pi/agent/auth.json", map[string]any{"openai-codex": map[string]any{
				"type": "oauth", "access": chatgptJWT(chatgptAccount), "refresh": "rt-e2e",
				"expires": time.Now().Add(24 * time.Hour).UnixMilli(), "accountId": chatgptAccount}})
		},
		checkCall: chatgptCall(chatgptJWT(chatgptAccount)),
		looping:   fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return loopAnswerResponses }),
		healthy: fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
			return fakellm.ResponsesAnswer{Text: healthyAnswer}
		}),
		wantPath: "/backend-api/codex/responses",
	}, {
		// pi signed in with GitHub Copilot: its base URL comes from the
		// Copilot token (proxy-ep), so only interception guards it. Each
		// model speaks its own API there: chat completions (GPT-4.1),
		// Responses (GPT-5 mini), Messages (Claude).
		name:      "pi-copilot-chat",
		env:       "LOOPGUARD_E2E_PI",
		resolve:   []string{"api.individual.githubcopilot.com"},
		args:      piCopilotArgs("gpt-4.1"),
		environ:   func(home string) []string { return []string{"HOME=" + home} },
		login:     piCopilotLogin,
		checkCall: piCopilotCall,
		looping:   agentModel(true),
		healthy:   fakellm.Rule{Response: fakellm.Response{Content: healthyAnswer}},
		wantPath:  "/chat/completions",
	}, {
		name:      "pi-copilot-responses",
		env:       "LOOPGUARD_E2E_PI",
		resolve:   []string{"api.individual.githubcopilot.com"},
		args:      piCopilotArgs("gpt-5-mini"),
		environ:   func(home string) []string { return []string{"HOME=" + home} },
		login:     piCopilotLogin,
		checkCall: piCopilotCall,
		looping:   fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return loopAnswerResponses }),
		healthy: fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
			return fakellm.ResponsesAnswer{Text: healthyAnswer}
		}),
		wantPath: "/responses",
	}, {
		name:      "pi-copilot-messages",
		env:       "LOOPGUARD_E2E_PI",
		resolve:   []string{"api.individual.githubcopilot.com"},
		args:      piCopilotArgs("claude-sonnet-4.5"),
		environ:   func(home string) []string { return []string{"HOME=" + home} },
		login:     piCopilotLogin,
		checkCall: piCopilotCall,
		looping:   fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer { return loopAnswerAnthropic }),
		healthy: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
			return fakellm.AnthropicAnswer{Text: healthyAnswer}
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
		healthy:  fakellm.Rule{Response: fakellm.Response{Content: healthyAnswer}},
		wantPath: "/v1/chat/completions",
	}, {
		// Qwen Code signed in with a Coding Plan by its own `qwen auth
		// coding-plan`: the plan's base URL in settings.json outranks
		// OPENAI_BASE_URL, so only interception guards it.
		name:    "qwen-coding-plan",
		env:     "LOOPGUARD_E2E_QWEN",
		resolve: []string{"coding.dashscope.aliyuncs.com"},
		args:    func(home, prompt string) []string { return []string{"-p", prompt} },
		environ: func(home string) []string { return []string{"HOME=" + home} },
		login:   qwenCodingPlanLogin,
		checkCall: func(r *fakellm.Request) error {
			if r.Header.Get("Authorization") != "Bearer "+codingPlanKey {
				return fmt.Errorf("Authorization %q; want the Coding Plan's key", r.Header.Get("Authorization"))
			}
			return nil
		},
		// Qwen Code's own detector (always on after 0.15) stops five
		// identical calls in a row, so the loop is a ping-pong.
		looping: pingPong(func(command string) fakellm.ToolCall {
			return fakellm.ToolCall{Name: "run_shell_command", Arguments: `{"command":"` + command + `"}`}
		}),
		healthy:  fakellm.Rule{Response: fakellm.Response{Content: healthyAnswer}},
		wantPath: "/v1/chat/completions",
	}, {
		// Continue's cn with an Anthropic key in ~/.continue/config.yaml:
		// its Anthropic client takes no base URL from the environment, so
		// only interception guards it.
		name:    "continue",
		env:     "LOOPGUARD_E2E_CONTINUE",
		resolve: []string{"api.anthropic.com"},
		args:    func(home, prompt string) []string { return []string{"-p", "--auto", prompt} },
		environ: func(home string) []string { return []string{"HOME=" + home} },
		login:   continueConfig,
		checkCall: func(r *fakellm.Request) error {
			if r.Header.Get("X-Api-Key") != anthropicKey {
				return fmt.Errorf("x-api-key %q; want the key of the config", r.Header.Get("X-Api-Key"))
			}
			return nil
		},
		// cn runs the command itself (--auto allows its Bash tool).
		looping: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
			return fakellm.AnthropicAnswer{Calls: []fakellm.ToolCall{{Name: "Bash", Arguments: `{"command":"cat missing_file.txt"}`}}}
		}),
		healthy: fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
			return fakellm.AnthropicAnswer{Text: healthyAnswer}
		}),
		wantPath: "/v1/messages",
	}, {
		// Cline's CLI signed in with a Cline account: its chat completions
		// on api.cline.bot, which no base URL moves, so only interception
		// guards it. Its account token reaches the host as a bearer token.
		name:    "cline",
		env:     "LOOPGUARD_E2E_CLINE",
		resolve: []string{"api.cline.bot"},
		args: func(home, prompt string) []string {
			return []string{"--json", "--timeout", "120", "-c", home, prompt}
		},
		// Its sessions run in its own process: its default starts a
		// background hub that outlives the run.
		environ: func(home string) []string { return []string{"HOME=" + home, "CLINE_SESSION_BACKEND_MODE=local"} },
		login:   clineAccountLogin,
		checkCall: func(r *fakellm.Request) error {
			if r.Header.Get("Authorization") != "Bearer "+clineToken {
				return fmt.Errorf("Authorization %q; want the Cline account's token", r.Header.Get("Authorization"))
			}
			return nil
		},
		// Cline runs the commands itself (its tools are approved by
		// default). Its own detector stops five identical calls in a row,
		// so the loop is a ping-pong.
		looping: pingPong(func(command string) fakellm.ToolCall {
			return fakellm.ToolCall{Name: "run_commands", Arguments: `{"commands":["` + command + `"]}`}
		}),
		healthy:  fakellm.Rule{Response: fakellm.Response{Content: healthyAnswer}},
		wantPath: "/api/v1/chat/completions",
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
			return fakellm.GeminiAnswer{Text: healthyAnswer}
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
			return fakellm.GeminiAnswer{Text: healthyAnswer}
		}),
		wantPath: "/v1internal:streamGenerateContent",
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

// chatgptAccount is the account of the emulated ChatGPT sign-ins, and
// chatgptAccess their access token.
const (
	chatgptAccount = "acct_e2e"
	chatgptAccess  = "chatgpt-access-e2e"
)

// apiByPath answers Responses requests with responses and the rest with
// chat.
func apiByPath(chat, responses fakellm.Rule) fakellm.Rule {
	return fakellm.Rule{Respond: func(r *fakellm.Request) fakellm.Response {
		if responses.Match(r) {
			return responses.Respond(r)
		}
		if chat.Respond != nil {
			return chat.Respond(r)
		}
		return chat.Response
	}}
}

// copilotToken is the GitHub token of the emulated Copilot sign-in.
const copilotToken = "gho_e2e"

// piCopilotToken is the Copilot token of pi's emulated GitHub Copilot
// sign-in: its proxy-ep names the host pi sends the model calls to.
const piCopilotToken = "tid=e2e;exp=4102444800;sku=copilot_individual;proxy-ep=proxy.individual.githubcopilot.com;8kp=1"

// piCopilotLogin signs pi in with GitHub Copilot as `pi /login` leaves
// ~/.pi/agent/auth.json: the GitHub token to refresh with and the Copilot
// token, far from expiry.
func piCopilotLogin(t *testing.T, home string) {
	writeJSON(t, home, ".pi/agent/auth.json", map[string]any{"github-copilot": map[string]any{
		"type": "oauth", "refresh": copilotToken, "access": piCopilotToken,
		"expires": time.Now().Add(24 * time.Hour).UnixMilli()}})
}

// piCopilotArgs is a headless pi run on model signed in with GitHub
// Copilot.
func piCopilotArgs(model string) func(home, prompt string) []string {
	return func(home, prompt string) []string {
		return []string{"-p", "--no-session", "--offline", "--provider", "github-copilot", "--model", model, prompt}
	}
}

// piCopilotCall checks that a model call reached Copilot with pi's
// Copilot token.
func piCopilotCall(r *fakellm.Request) error {
	if r.Header.Get("Authorization") != "Bearer "+piCopilotToken {
		return fmt.Errorf("Authorization %q; want the Copilot token", r.Header.Get("Authorization"))
	}
	return nil
}

// chatgptCall checks that a model call reached the ChatGPT backend with the
// sign-in's token and account.
func chatgptCall(token string) func(r *fakellm.Request) error {
	return func(r *fakellm.Request) error {
		if r.Header.Get("Authorization") != "Bearer "+token || r.Header.Get("Chatgpt-Account-Id") != chatgptAccount {
			return fmt.Errorf("Authorization %q, ChatGPT-Account-Id %q; want the sign-in's token and account",
				r.Header.Get("Authorization"), r.Header.Get("Chatgpt-Account-Id"))
		}
		return nil
	}
}

// writeJSON writes v as JSON to path under home, making its directories.
func writeJSON(t *testing.T, home, path string, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	path = filepath.Join(home, path)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// opencodeChatGPTLogin signs opencode in with ChatGPT Plus/Pro as its
// `opencode auth login` leaves it: OAuth tokens in
// ~/.local/share/opencode/auth.json, far from expiry.
func opencodeChatGPTLogin(t *testing.T, home string) {
	writeJSON(t, home, ".local/share/opencode/auth.json", map[string]any{"openai": map[string]any{
		"type": "oauth", "refresh": "rt-e2e", "access": chatgptAccess,
		"expires": time.Now().Add(24 * time.Hour).UnixMilli(), "accountId": chatgptAccount}})
}

// claudeSubscriptionCall checks that a model call reached Anthropic with
// a Claude.ai subscription's bearer token and the oauth beta.
func claudeSubscriptionCall(r *fakellm.Request) error {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer "+claudeOAuthToken) || r.Header.Get("X-Api-Key") != "" ||
		!strings.Contains(r.Header.Get("Anthropic-Beta"), "oauth-") {
		return fmt.Errorf("Authorization %q, X-Api-Key %q, anthropic-beta %q; want the subscription's bearer token and the oauth beta",
			r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), r.Header.Get("Anthropic-Beta"))
	}
	return nil
}

// codingPlanKey is the key of the emulated Qwen Code Coding Plan sign-in.
const codingPlanKey = "sk-sp-e2e"

// qwenCodingPlanLogin signs Qwen Code in with a Coding Plan (China region)
// as its sign-in leaves ~/.qwen/settings.json (`qwen auth coding-plan` in
// 0.15, /auth later): the plan's model with its base URL and key, the
// OpenAI protocol selected.
func qwenCodingPlanLogin(t *testing.T, home string) {
	const envKey = "BAILIAN_CODING_PLAN_API_KEY"
	writeJSON(t, home, ".qwen/settings.json", map[string]any{
		"env": map[string]any{envKey: codingPlanKey},
		"modelProviders": map[string]any{"openai": []any{map[string]any{
			"id": "qwen3.5-plus", "name": "[ModelStudio Coding Plan] qwen3.5-plus",
			"baseUrl": "https://coding.dashscope.aliyuncs.com/v1", "envKey": envKey,
			"generationConfig": map[string]any{"extra_body": map[string]any{"enable_thinking": true}, "contextWindowSize": 1000000},
		}}},
		"security": map[string]any{"auth": map[string]any{"selectedType": "openai"}},
		"model":    map[string]any{"name": "qwen3.5-plus"},
	})
}

// continueConfig writes Continue's ~/.continue/config.yaml as its users
// write it for an Anthropic key: one Claude model, the key inline.
func continueConfig(t *testing.T, home string) {
	t.Helper()
	config := "name: Local\nversion: 1.0.0\nschema: v1\nmodels:\n" +
		"  - name: Claude\n    provider: anthropic\n    model: claude-sonnet-4-5\n    apiKey: " + anthropicKey + "\n" +
		"    roles: [chat, edit, apply]\n"
	dir := filepath.Join(home, ".continue")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
}

// clineToken is the access token of the emulated Cline account sign-in.
const clineToken = "workos:cline-access-e2e"

// clineAccountLogin signs Cline's CLI in with a Cline account as its
// OAuth sign-in leaves ~/.cline/data/settings/providers.json: the
// account's tokens, far from expiry, on the cline provider.
func clineAccountLogin(t *testing.T, home string) {
	writeJSON(t, home, ".cline/data/settings/providers.json", map[string]any{
		"version": 1, "lastUsedProvider": "cline", "modes": map[string]any{},
		"providers": map[string]any{"cline": map[string]any{
			"settings": map[string]any{"provider": "cline", "model": "anthropic/claude-sonnet-4.5", "auth": map[string]any{
				"accessToken": clineToken, "refreshToken": "cline-refresh-e2e", "accountId": "acct-e2e",
				"expiresAt": time.Now().Add(24 * time.Hour).UnixMilli()}},
			"updatedAt": time.Now().UTC().Format(time.RFC3339), "tokenSource": "oauth"}},
	})
}

// pingPong is a model that alternates two failing commands forever, each
// a tool call made by call: a loop that agents' own detectors of
// identical calls in a row (Cline's, Qwen Code's after 0.15) let through.
func pingPong(call func(command string) fakellm.ToolCall) fakellm.Rule {
	return fakellm.Rule{Respond: func(r *fakellm.Request) fakellm.Response {
		n := 0
		gjson.GetBytes(r.Body, "messages").ForEach(func(_, m gjson.Result) bool {
			if m.Get("role").String() == "assistant" {
				n++
			}
			return true
		})
		return fakellm.Response{ToolCalls: []fakellm.ToolCall{call([2]string{"cat missing_file.txt", "ls missing_dir"}[n%2])}}
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

// healthyAnswer is the fake model's answer in the healthy runs.
const healthyAnswer = "The build passes."

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
				args := []string{"run", "-json", jsonPath}
				env := append(os.Environ(), "OPENAI_BASE_URL="+fake.URL()+"/v1", "ANTHROPIC_BASE_URL="+fake.URL(),
					"GOOGLE_GEMINI_BASE_URL="+fake.URL(), "CODE_ASSIST_ENDPOINT="+fake.URL())
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
					model := r.Path == a.wantPath || a.alsoPath != "" && r.Path == a.alsoPath
					if model && (r.Method == "POST" || r.Socket) {
						calls++
					}
					// A socket turn carries no headers: its handshake has them.
					if model && !r.Socket {
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
					var seen []string
					for _, r := range fake.Requests() {
						seen = append(seen, r.Method+" "+r.Path)
					}
					t.Fatalf("summary %s; want %d model calls in one session, exit code 0, LOOP_DETECTED %v; the fake saw %q",
						b, want, looping, seen)
				}
				// A healthy run is left alone: nothing seen, nothing changed,
				// every call the upstream's answer, which the agent shows.
				if !looping && (sum.Detections > 0 || sum.Interventions > 0 || sum.Answered != sum.Calls ||
					!strings.Contains(stdout.String(), healthyAnswer)) {
					t.Fatalf("summary %s; want a healthy run left alone, the agent showing %q", b, healthyAnswer)
				}
				if looping && sum.Calls > maxLoopCalls {
					t.Fatalf("summary %s; want LOOP_DETECTED within %d model calls", b, maxLoopCalls)
				}
			})
		}
	}
}
