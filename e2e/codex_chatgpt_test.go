package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
)

// chatgptAuthFile writes a Codex auth.json signed in with ChatGPT into home:
// unsigned JWTs carrying the claims Codex reads (it does not verify them),
// a future exp and a recent last_refresh so that no refresh is attempted.
func chatgptAuthFile(t *testing.T, home, account string) {
	t.Helper()
	now := time.Now()
	jwt := chatgptJWT(account)
	auth := map[string]any{
		"auth_mode":      "chatgpt",
		"OPENAI_API_KEY": nil,
		"tokens":         map[string]string{"id_token": jwt, "access_token": jwt, "refresh_token": "rt-e2e", "account_id": account},
		"last_refresh":   now.UTC().Format(time.RFC3339),
	}
	b, _ := json.Marshal(auth)
	if err := os.WriteFile(filepath.Join(home, "auth.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// chatgptJWT is an unsigned access token of a ChatGPT sign-in to account,
// valid for a day: the claims clients read without verifying them.
func chatgptJWT(account string) string {
	seg := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	now := time.Now().Truncate(time.Hour) // one token for a test's runs
	return seg(map[string]string{"alg": "none", "typ": "JWT"}) + "." + seg(map[string]any{
		"email": "e2e@example.com",
		"exp":   now.Add(24 * time.Hour).Unix(),
		"iat":   now.Unix(),
		"https://api.openai.com/auth": map[string]string{
			"chatgpt_plan_type": "plus", "chatgpt_account_id": account, "chatgpt_user_id": "user-e2e"},
	}) + "." + seg("unsigned") // Codex wants a signature segment, not an empty one
}

// TestRunCodexSignedInWithChatGPT runs the real Codex CLI signed in with
// ChatGPT under `loopguard run`, against the fake serving the ChatGPT Codex
// backend's path, by both routes: intercepted (Codex goes to chatgpt.com by
// itself, which -resolve sends to the fake: its workspace check and model
// list too) and through its base URL (-upstream); over both of its
// transports: its default, the Responses WebSocket (the upgrade carries its
// account header and token), and HTTP when the upgrade is refused, where it
// sends its turns zstd-coded. loopguard reads them either way: a looping
// session ends with LOOP_DETECTED and a healthy one is untouched.
func TestRunCodexSignedInWithChatGPT(t *testing.T) {
	bin := os.Getenv("LOOPGUARD_E2E_CODEX")
	if bin == "" {
		t.Skip("set LOOPGUARD_E2E_CODEX to the Codex CLI's binary (npm @openai/codex)")
	}
	loopguard, _ := buildRunBinaries(t)
	const account = "acct_e2e"
	const backend = "/backend-api/codex"
	type run struct {
		route, transport string
		looping          bool
	}
	var runs []run
	for _, route := range []string{"intercepted", "base-url"} {
		for _, transport := range []string{"websocket", "http"} {
			runs = append(runs, run{route, transport, false}, run{route, transport, true})
		}
	}
	for _, tc := range runs {
		looping := tc.looping
		t.Run(tc.route+"/"+tc.transport+"/"+map[bool]string{false: "healthy", true: "looping"}[looping], func(t *testing.T) {
			answer := fakellm.ResponsesAnswer{Text: "The build passes."}
			if looping {
				answer = loopAnswerResponses
			}
			rules := []fakellm.Rule{
				// ChatGPT's apps (plugins, their MCP server) are not served:
				// answered as the fake's default, Codex waits 30 s on the MCP
				// server before its first turn.
				{Match: func(r *fakellm.Request) bool { return strings.HasPrefix(r.Path, "/backend-api/ps/") },
					Response: fakellm.Response{Raw: []byte(`{"detail":"Not Found"}`), Status: http.StatusNotFound}},
				// Its workspace check, which ChatGPT answers with the
				// accounts the token may use; Codex starts no session
				// without it.
				{Match: func(r *fakellm.Request) bool { return r.Path == "/backend-api/wham/accounts/check" },
					Response: fakellm.Response{Raw: []byte(`{"accounts":[{"id":"` + account + `","account_id":"` + account +
						`","name":"Personal","structure":"personal","plan_type":"plus","is_deactivated":false,"can_access_with_session":true,` +
						`"workspace_backend_origin":"https://chatgpt.com","account_routing_override":"NO_CONSTRAINT"}],` +
						`"account_ordering":["` + account + `"],"default_account_id":"` + account + `"}`)}},
				fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return answer }),
			}
			if tc.transport == "http" {
				// 426 sends Codex to HTTP at once (any other refusal costs
				// it seven retries).
				rules = append([]fakellm.Rule{{Match: func(r *fakellm.Request) bool {
					return r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/responses")
				},
					Response: fakellm.Response{Raw: []byte{}, Status: http.StatusUpgradeRequired}}}, rules...)
			}
			fake := fakellm.Start(t, fakellm.Script{Rules: rules})
			home := t.TempDir()
			chatgptAuthFile(t, home, account)
			jsonPath := filepath.Join(home, "summary.json")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			codexArgs := []string{bin, "exec", "--skip-git-repo-check", "--ephemeral", "-m", "fake-model", "-C", home}
			args := []string{"run", "-json", jsonPath, "-resolve", "chatgpt.com=" + fake.URL(), "--"}
			if tc.route == "base-url" {
				args = []string{"run", "-json", jsonPath, "-upstream", fake.URL() + backend, "--"}
				// Its plugin and account calls stay on the fake too.
				codexArgs = append(codexArgs, "-c", `chatgpt_base_url="`+fake.URL()+`/backend-api/"`)
			}
			args = append(append(args, codexArgs...), "Make the build pass.")
			cmd := exec.CommandContext(ctx, loopguard, args...)
			cmd.WaitDelay = 10 * time.Second
			cmd.Env = append(signedInEnv(), "CODEX_HOME="+home, "HOME="+home, "TMPDIR="+home)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("codex stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
			if err != nil {
				t.Fatalf("loopguard run -- codex: %v", err)
			}
			b, err := os.ReadFile(jsonPath)
			if err != nil {
				t.Fatal(err)
			}
			var sum runSummary
			if err := json.Unmarshal(b, &sum); err != nil {
				t.Fatal(err)
			}
			calls, upgrades := 0, 0
			for _, x := range fake.Exchanges() {
				r := x.Request
				if r.Method == http.MethodGet && r.Path == backend+"/responses" && !r.Socket {
					upgrades++
					if tc.transport == "websocket" {
						if x.Status != http.StatusSwitchingProtocols {
							t.Errorf("upgrade answered %d; want 101", x.Status)
						}
						if r.Header.Get("Chatgpt-Account-Id") != account || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
							t.Errorf("the upgrade reached the upstream without Codex's account header and token")
						}
					}
					continue
				}
				if r.Socket {
					if tc.transport != "websocket" {
						t.Errorf("a socket turn after the upgrade was refused")
					}
					if r.Path != backend+"/responses" {
						t.Errorf("socket turn on %s", r.Path)
					}
					calls++
					continue
				}
				if r.Method != http.MethodPost || r.Path != backend+"/responses" {
					continue
				}
				if tc.transport == "websocket" {
					t.Errorf("a POST on the socket run: Codex left the socket")
				}
				calls++
				if calls == 1 {
					var names []string
					for k := range r.Header {
						names = append(names, k)
					}
					slices.Sort(names)
					t.Logf("Codex's turn: Content-Encoding %q, originator %q, headers %s",
						r.Header.Get("Content-Encoding"), r.Header.Get("Originator"), strings.Join(names, ", "))
				}
				if r.Header.Get("Content-Encoding") != "zstd" || r.Coded == nil {
					t.Errorf("turn %d reached the upstream with Content-Encoding %q; want zstd", calls, r.Header.Get("Content-Encoding"))
				}
				if got := r.Header.Get("Chatgpt-Account-Id"); got != account {
					t.Errorf("turn %d: ChatGPT-Account-Id %q; want %q", calls, got, account)
				}
				if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
					t.Errorf("turn %d: no bearer token passed through", calls)
				}
			}
			t.Logf("%s: %d upgrade(s), %d model call(s) upstream", tc.transport, upgrades, calls)
			if calls == 0 {
				t.Fatalf("no turn reached %s/responses; the fake saw %d requests", backend, len(fake.Requests()))
			}
			if tc.transport == "websocket" && (upgrades == 0 || upgrades > 2) {
				t.Errorf("%d upgrades; want Codex on one socket, with no retries", upgrades)
			}
			want := calls
			if looping {
				want++ // LOOP_DETECTED is loopguard's own answer
			}
			if sum.Calls != want || sum.ExitCode != 0 || sum.LoopDetected != looping {
				t.Fatalf("summary %s; want %d model calls, exit code 0, LOOP_DETECTED %v", b, want, looping)
			}
			if tc.route == "base-url" && !strings.Contains(stderr.String(), "loopguard: upstream "+fake.URL()+backend+": -upstream") {
				t.Errorf("the summary does not name the upstream and why")
			}
		})
	}
}
