package agentrun

import (
	"slices"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/proxy"
)

const base = "http://127.0.0.1:4000/s/run-1"

// TestEnvironFamilies: each family of base-URL variables gets the session's
// URL in the form its readers expect, and everything else passes through.
func TestEnvironFamilies(t *testing.T) {
	tests := []struct {
		name string
		give []string // the environment before
		want []string // entries that must be in the result
		none []string // variable names that must not be set
	}{
		{name: "OpenAI SDKs, Codex, Qwen Code, LiteLLM: OPENAI_BASE_URL with /v1",
			give: []string{"OPENAI_BASE_URL=http://vllm:8000/v1"}, want: []string{"OPENAI_BASE_URL=" + base + "/v1"}},
		{name: "aider, LiteLLM, LangChain: OPENAI_API_BASE with /v1",
			give: []string{"OPENAI_API_BASE=http://vllm:8000/v1"}, want: []string{"OPENAI_API_BASE=" + base + "/v1"}},
		{name: "Claude Code, Anthropic SDKs: ANTHROPIC_BASE_URL without /v1",
			give: []string{"ANTHROPIC_BASE_URL=https://gw.example"}, want: []string{"ANTHROPIC_BASE_URL=" + base}},
		{name: "aider, LiteLLM on Anthropic: ANTHROPIC_API_BASE without /v1",
			give: []string{"ANTHROPIC_API_BASE=https://gw.example"}, want: []string{"ANTHROPIC_API_BASE=" + base}},
		{name: "unset common variables are set",
			give: nil, want: []string{"OPENAI_BASE_URL=" + base + "/v1", "OPENAI_API_BASE=" + base + "/v1", "ANTHROPIC_BASE_URL=" + base, "ANTHROPIC_API_BASE=" + base},
			none: []string{"LLM_BASE_URL"}},
		{name: "Ollama's libraries: OLLAMA_HOST as a URL without /v1",
			give: []string{"OLLAMA_HOST=127.0.0.1:11434"}, want: []string{"OLLAMA_HOST=" + base}},
		{name: "OpenHands: LLM_BASE_URL only when it was set",
			give: []string{"LLM_BASE_URL=http://vllm:8000/v1"}, want: []string{"LLM_BASE_URL=" + base + "/v1"}},
		{name: "keys and other variables pass through untouched",
			give: []string{"OPENAI_API_KEY=sk-1", "ANTHROPIC_API_KEY=sk-ant-2", "PATH=/bin", "OPENAI_BASE_URL_X=y"},
			want: []string{"OPENAI_API_KEY=sk-1", "ANTHROPIC_API_KEY=sk-ant-2", "PATH=/bin", "OPENAI_BASE_URL_X=y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Environ(tt.give, base+"/")
			for _, w := range tt.want {
				if !slices.Contains(got, w) {
					t.Errorf("Environ(%q) = %q; want it to hold %q", tt.give, got, w)
				}
			}
			for _, kv := range got {
				name, _, _ := strings.Cut(kv, "=")
				if slices.Contains(tt.none, name) {
					t.Errorf("Environ(%q) sets %s", tt.give, kv)
				}
			}
			seen := map[string]bool{}
			for _, kv := range got {
				name, _, _ := strings.Cut(kv, "=")
				if _, ok := variable(name); ok && seen[name] {
					t.Errorf("Environ(%q) sets %s twice", tt.give, name)
				}
				seen[name] = true
			}
		})
	}
}

func TestUpstreams(t *testing.T) {
	env := map[string]string{
		"OPENAI_API_BASE":    "http://second:8000/v1",
		"OPENAI_BASE_URL":    " http://first:8000/v1 ",
		"ANTHROPIC_API_BASE": "https://litellm.example",
	}
	got := Upstreams(func(k string) string { return env[k] })
	if got[wireapi.OpenAI] != "http://first:8000/v1" || got[wireapi.AnthropicWire] != "https://litellm.example" {
		t.Fatalf("Upstreams = %v; want OPENAI_BASE_URL first, ANTHROPIC_API_BASE for anthropic", got)
	}
	if got := Upstreams(func(string) string { return "" }); len(got) != 0 {
		t.Fatalf("Upstreams of an empty environment = %v; want none", got)
	}
}

func TestOllamaURL(t *testing.T) {
	for _, tt := range []struct{ give, want string }{
		{"127.0.0.1:11434", "http://127.0.0.1:11434"},
		{"0.0.0.0", "http://127.0.0.1:11434"},
		{"0.0.0.0:9000", "http://127.0.0.1:9000"},
		{":9000", "http://127.0.0.1:9000"},
		{"gpu-box", "http://gpu-box:11434"},
		{"https://ollama.example/prefix/", "https://ollama.example:443/prefix"},
		{"http://[::1]:8080", "http://[::1]:8080"},
	} {
		if got := ollamaURL(tt.give); got != tt.want {
			t.Errorf("ollamaURL(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

// TestChooseUpstreams is the order ChooseUpstreams picks in for any agent:
// -upstream, the base-URL variables, the configuration, the vendor's API.
func TestChooseUpstreams(t *testing.T) {
	const vllm = "OPENAI_BASE_URL=http://vllm:8000/v1"
	tests := []struct {
		name    string
		flag    string
		env     []string
		cfg     proxy.UpstreamConfig
		openai  string
		anthrop string
	}{
		{"the flag wins for both", "http://flag:1", []string{vllm}, proxy.UpstreamConfig{URL: "http://cfg:1"}, "http://flag:1", "http://flag:1"},
		{"the environment, then the vendor", "", []string{vllm}, proxy.UpstreamConfig{}, "http://vllm:8000/v1", PublicUpstream[wireapi.AnthropicWire]},
		{"the environment before the config", "", []string{vllm}, proxy.UpstreamConfig{URL: "http://cfg:1"}, "http://vllm:8000/v1", "http://cfg:1"},
		{"the config's anthropic_url", "", nil, proxy.UpstreamConfig{URL: "http://cfg:1", AnthropicURL: "http://ant:1"}, "http://cfg:1", "http://ant:1"},
		{"nothing: the vendors' APIs", "", nil, proxy.UpstreamConfig{}, PublicUpstream[wireapi.OpenAI], PublicUpstream[wireapi.AnthropicWire]},
		{"OLLAMA_HOST when no OpenAI variable names one", "", []string{"OLLAMA_HOST=http://127.0.0.1:11434"}, proxy.UpstreamConfig{},
			"http://127.0.0.1:11434", PublicUpstream[wireapi.AnthropicWire]},
		{"an OpenAI variable before OLLAMA_HOST", "", []string{vllm, "OLLAMA_HOST=http://127.0.0.1:11434"}, proxy.UpstreamConfig{},
			"http://vllm:8000/v1", PublicUpstream[wireapi.AnthropicWire]},
	}
	for _, tt := range tests {
		got := ChooseUpstreams(Options{Upstream: tt.flag, Env: tt.env}, tt.cfg)
		if got[wireapi.OpenAI].URL != tt.openai || got[wireapi.AnthropicWire].URL != tt.anthrop {
			t.Errorf("%s: ChooseUpstreams = %+v; want openai %s, anthropic %s", tt.name, got, tt.openai, tt.anthrop)
		}
	}
}

func TestHint(t *testing.T) {
	tests := []struct {
		command      string
		intercepting bool
		want         []string
	}{
		{"opencode", false, []string{`to guard it, set`, `"baseURL": "` + base + `/v1"`}},
		{"/usr/local/bin/crush", false, []string{`"base_url": "` + base + `/v1"`}},
		// pi's Anthropic and ChatGPT providers add /v1 themselves.
		{"pi", false, []string{`"baseUrl": "` + base + `/v1" (OpenAI-compatible APIs)`, `"` + base + `" (anthropic-messages, openai-codex-responses)`}},
		{"cn", false, []string{`apiBase: ` + base + `/v1`}},
		{"opencode", true, []string{`interception guards opencode on the model hosts; for a provider elsewhere, opencode reads its base URL from opencode.json`, `"baseURL": "` + base + `/v1"`}},
		{"claude", false, nil},
		{"aider", true, nil},
	}
	for _, tt := range tests {
		got := Hint(tt.command, base, tt.intercepting)
		if tt.want == nil && got != "" {
			t.Errorf("Hint(%q, %v) = %q; want none", tt.command, tt.intercepting, got)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("Hint(%q, %v) = %q; want %q in it", tt.command, tt.intercepting, got, w)
			}
		}
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		give, want []string
	}{
		{[]string{"codex", "exec", "fix it"}, []string{"codex", "-c", `openai_base_url="` + base + `/v1"`, "exec", "fix it"}},
		{[]string{"/opt/bin/codex"}, []string{"/opt/bin/codex", "-c", `openai_base_url="` + base + `/v1"`}},
		{[]string{"claude", "-p", "fix it"}, []string{"claude", "-p", "fix it"}},
	}
	for _, tt := range tests {
		if got := Args(tt.give, base); !slices.Equal(got, tt.want) {
			t.Errorf("Args(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

// TestGeminiUpstreams: Gemini CLI's two wires reach Google's hosts unless
// their own variable or urls.<wire> names another; the configuration's url
// (an OpenAI-style server) never serves them. Both variables point at the
// session's URL without /v1: Gemini CLI appends /v1beta/... and
// /v1internal:... itself.
func TestGeminiUpstreams(t *testing.T) {
	cfg := proxy.UpstreamConfig{URL: "http://vllm:8000/v1"}
	got := ChooseUpstreams(Options{}, cfg)
	if got[wireapi.GeminiWire].URL != "https://generativelanguage.googleapis.com" || got[wireapi.CodeAssistWire].URL != "https://cloudcode-pa.googleapis.com" {
		t.Errorf("ChooseUpstreams with url set = %+v; want Google's hosts for gemini and code_assist", got)
	}
	env := []string{"GOOGLE_GEMINI_BASE_URL=http://gw:4000", "CODE_ASSIST_ENDPOINT=http://ca:1"}
	got = ChooseUpstreams(Options{Env: env}, cfg)
	if got[wireapi.GeminiWire].URL != "http://gw:4000" || got[wireapi.CodeAssistWire].URL != "http://ca:1" {
		t.Errorf("ChooseUpstreams with the variables = %+v", got)
	}
	cfg.URLs = map[string]string{"gemini": "http://cfg-gemini:1"}
	if got = ChooseUpstreams(Options{}, cfg); got[wireapi.GeminiWire].URL != "http://cfg-gemini:1" ||
		got[wireapi.GeminiWire].Reason != "the configuration's upstream.urls.gemini" {
		t.Errorf("ChooseUpstreams with urls.gemini = %+v", got[wireapi.GeminiWire])
	}
	vars := map[string]string{}
	for _, kv := range Environ(nil, "http://127.0.0.1:9/s/run1") {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	if vars["GOOGLE_GEMINI_BASE_URL"] != "http://127.0.0.1:9/s/run1" || vars["CODE_ASSIST_ENDPOINT"] != "http://127.0.0.1:9/s/run1" {
		t.Errorf("Environ: GOOGLE_GEMINI_BASE_URL %q, CODE_ASSIST_ENDPOINT %q", vars["GOOGLE_GEMINI_BASE_URL"], vars["CODE_ASSIST_ENDPOINT"])
	}
}
