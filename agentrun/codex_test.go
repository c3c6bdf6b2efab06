package agentrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/proxy"
)

// chatgptAuth is Codex's auth.json when signed in with ChatGPT (the tokens
// are placeholders: loopguard reads only that they are there).
const chatgptAuth = `{"auth_mode":"chatgpt","OPENAI_API_KEY":null,"tokens":{"id_token":"e30.e30.","access_token":"e30.e30.","refresh_token":"rt","account_id":"acct_1"},"last_refresh":"2026-01-01T00:00:00Z"}`

func TestChooseUpstreamsCodexChatGPT(t *testing.T) {
	signedIn := t.TempDir()
	if err := os.WriteFile(filepath.Join(signedIn, "auth.json"), []byte(chatgptAuth), 0o600); err != nil {
		t.Fatal(err)
	}
	apiKey := t.TempDir()
	if err := os.WriteFile(filepath.Join(apiKey, "auth.json"), []byte(`{"auth_mode":"apikey","OPENAI_API_KEY":"sk-1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command string
		env     []string
		flag    string
		cfg     proxy.UpstreamConfig
		want    string
		why     string // in the reason
	}{
		{"signed in with ChatGPT", "codex", []string{"CODEX_HOME=" + signedIn}, "", proxy.UpstreamConfig{},
			ChatGPTCodexBackend, "signed in with ChatGPT"},
		{"default CODEX_HOME under HOME", "/usr/bin/codex", []string{"HOME=" + filepath.Dir(signedIn), "CODEX_HOME="}, "", proxy.UpstreamConfig{},
			"", ""}, // filled below: HOME/.codex
		{"OPENAI_API_KEY in the shell changes nothing", "codex", []string{"CODEX_HOME=" + signedIn, "OPENAI_API_KEY=sk-x"}, "",
			proxy.UpstreamConfig{}, ChatGPTCodexBackend, "signed in with ChatGPT"},
		{"before the configuration's url", "codex", []string{"CODEX_HOME=" + signedIn}, "", proxy.UpstreamConfig{URL: "http://cfg:1/v1"},
			ChatGPTCodexBackend, "signed in with ChatGPT"},
		{"-upstream wins", "codex", []string{"CODEX_HOME=" + signedIn}, "http://flag:1", proxy.UpstreamConfig{},
			"http://flag:1", "-upstream"},
		{"a base-URL variable wins", "codex", []string{"CODEX_HOME=" + signedIn, "OPENAI_BASE_URL=http://vllm:8000/v1"}, "",
			proxy.UpstreamConfig{}, "http://vllm:8000/v1", "OPENAI_BASE_URL"},
		{"CODEX_API_KEY: the vendor API", "codex", []string{"CODEX_HOME=" + signedIn, "CODEX_API_KEY=sk-1"}, "", proxy.UpstreamConfig{},
			PublicUpstream[wireapi.OpenAI], "vendor"},
		{"upstream.api_key: the configuration", "codex", []string{"CODEX_HOME=" + signedIn}, "",
			proxy.UpstreamConfig{URL: "http://cfg:1/v1", APIKey: "sk-cfg"}, "http://cfg:1/v1", "upstream.url"},
		{"signed in with an API key", "codex", []string{"CODEX_HOME=" + apiKey}, "", proxy.UpstreamConfig{},
			PublicUpstream[wireapi.OpenAI], "vendor"},
		{"not Codex", "claude", []string{"CODEX_HOME=" + signedIn}, "", proxy.UpstreamConfig{}, PublicUpstream[wireapi.OpenAI], "vendor"},
	}
	// HOME/.codex: a home whose .codex is the signed-in folder.
	home := t.TempDir()
	if err := os.Symlink(signedIn, filepath.Join(home, ".codex")); err != nil {
		t.Fatal(err)
	}
	tests[1].env[0] = "HOME=" + home
	tests[1].want, tests[1].why = ChatGPTCodexBackend, filepath.Join(home, ".codex", "auth.json")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ChooseUpstreams(Options{Command: []string{tt.command, "exec"}, Env: tt.env, Upstream: tt.flag}, tt.cfg)
			c := got[wireapi.OpenAI]
			if c.URL != tt.want || !strings.Contains(c.Reason, tt.why) {
				t.Errorf("ChooseUpstreams = %+v; want %s, a reason with %q", c, tt.want, tt.why)
			}
			if a := got[wireapi.AnthropicWire].URL; a == ChatGPTCodexBackend {
				t.Errorf("Anthropic upstream %s; want it left alone", a)
			}
		})
	}
}

func TestSummaryPrintsUpstream(t *testing.T) {
	sum := Summary{Session: "run-1", Upstream: ChatGPTCodexBackend, UpstreamReason: "Codex is signed in with ChatGPT"}
	var b strings.Builder
	sum.Print(&b)
	if want := "loopguard: upstream " + ChatGPTCodexBackend + ": Codex is signed in with ChatGPT\n"; !strings.Contains(b.String(), want) {
		t.Errorf("Print =\n%s\nwant a line %q", b.String(), want)
	}
}
