package wireapi

import "testing"

func TestMatch(t *testing.T) {
	tests := []struct {
		give   string
		want   Name
		stream bool
	}{
		{"/v1/chat/completions", Chat, false},
		{"/openai/v1/chat/completions", Chat, false},
		{"/chat/completions", Chat, false},
		{"/v1/responses", Responses, false},
		{"/openai/v1/responses", Responses, false},
		{"/responses", Responses, false},
		{"/v1/responses/resp_1", "", false},
		{"/v1/messages", Anthropic, false},
		{"/anthropic/v1/messages", Anthropic, false},
		{"/messages", Anthropic, false},
		{"/v1/threads/t/messages", "", false},
		// The model hosts' own prefixes (intercept/hosts.go): Zen, Cline
		// and OpenRouter, DashScope, ChatGPT.
		{"/zen/v1/chat/completions", Chat, false},
		{"/zen/v1/responses", Responses, false},
		{"/zen/v1/messages", Anthropic, false},
		{"/api/v1/chat/completions", Chat, false},
		{"/compatible-mode/v1/chat/completions", Chat, false},
		{"/backend-api/codex/responses", Responses, false},
		{"/api/chat", Ollama, false},
		{"/ollama/api/generate", OllamaGenerate, false},
		{"/v1/models", "", false},
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent", Gemini, true},
		{"/v1beta/models/gemini-2.5-pro:generateContent", Gemini, false},
		{"/v1/models/gemini-2.5-flash:generateContent", Gemini, false},
		{"/gemini/v1beta/models/m:streamGenerateContent", Gemini, true},
		{"/v1beta/models/m:countTokens", "", false},
		{"/v1beta/models", "", false},
		{"/v1internal:streamGenerateContent", CodeAssist, true},
		{"/v1internal:generateContent", CodeAssist, false},
		{"/v1internal:loadCodeAssist", "", false},
		{"", "", false},
		{"/", "", false},
	}
	for _, tt := range tests {
		r := Match(tt.give)
		var got Name
		if r.API != nil {
			got = r.API.Name
		}
		if got != tt.want || r.Stream != tt.stream && r.API != nil && r.API.Stream == StreamMethod {
			t.Errorf("Match(%q) = %q, stream %v; want %q, stream %v", tt.give, got, r.Stream, tt.want, tt.stream)
		}
		if b := Match([]byte(tt.give)); b != r {
			t.Errorf("Match([]byte(%q)) = %+v; want %+v as for the string", tt.give, b, r)
		}
	}
}

func TestMatchPattern(t *testing.T) {
	tests := []struct {
		pattern, path string
		ok            bool
		model         string
	}{
		{"*/models/{model}:generateContent", "/v1beta/models/gemini-2.5-pro:generateContent", true, "gemini-2.5-pro"},
		{"*/models/{model}:generateContent", "/models/m:generateContent", true, "m"},
		{"*/models/{model}:generateContent", "/v1beta/models/:generateContent", false, ""},
		{"*/models/{model}:generateContent", "/v1beta/models/a:b:generateContent", false, ""},
		{"*/models/{model}:generateContent", "/v1beta/xmodels/m:generateContent", false, ""},
		{"/v1beta/models/{model}:generateContent", "/x/v1beta/models/m:generateContent", false, ""},
		{"/v1beta/models/{model}:generateContent", "/v1beta/models/m:generateContent", true, "m"},
		{"/v1beta/models/{model}:generateContent", "/v1beta/models/a/b:generateContent", false, ""},
		{"*/v1/responses", "/v1/responses", true, ""},
		{"/responses", "/x/responses", false, ""},
	}
	for _, tt := range tests {
		ok, from, to := match(tt.pattern, tt.path)
		if ok != tt.ok || ok && tt.path[from:to] != tt.model {
			t.Errorf("match(%q, %q) = %v, %q; want %v, %q", tt.pattern, tt.path, ok, tt.path[from:to], tt.ok, tt.model)
		}
	}
}

// TestLabelsUnique: the metrics labels and names are one per API.
func TestLabelsUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range APIs {
		if seen[a.Label] || seen["name:"+string(a.Name)] {
			t.Errorf("API %q: label %q or name used twice", a.Name, a.Label)
		}
		seen[a.Label], seen["name:"+string(a.Name)] = true, true
		if Lookup(a.Name) == nil || LookupWire(a.Wire) == nil || len(a.Paths) == 0 {
			t.Errorf("API %q: not found by name, no wire %q, or no path", a.Name, a.Wire)
		}
	}
}

func TestWireOf(t *testing.T) {
	has := func(h string) bool { return h == "anthropic-version" }
	if w := WireOf("/v1/messages/count_tokens", has); w == nil || w.Name != AnthropicWire {
		t.Errorf("WireOf(count_tokens, anthropic-version) = %v; want anthropic", w)
	}
	if w := WireOf("/v1internal:loadCodeAssist", func(string) bool { return false }); w == nil || w.Name != CodeAssistWire {
		t.Errorf("WireOf(loadCodeAssist) = %v; want code_assist", w)
	}
	if w := WireOf("/v1beta/models", func(string) bool { return false }); w == nil || w.Name != GeminiWire {
		t.Errorf("WireOf(/v1beta/models) = %v; want gemini", w)
	}
	if w := WireOf("/v1/models", func(string) bool { return false }); w != nil {
		t.Errorf("WireOf(/v1/models, no header) = %v; want nil", w.Name)
	}
}

func TestModel(t *testing.T) {
	if got := Model("/v1beta/models/gemini-2.5-pro:streamGenerateContent"); got != "gemini-2.5-pro" {
		t.Errorf("Model = %q; want gemini-2.5-pro", got)
	}
	if got := Model("/v1/chat/completions"); got != "" {
		t.Errorf("Model(chat) = %q; want none", got)
	}
	if got := Lookup(Gemini).ReplayPath("m"); got != "/v1beta/models/m:generateContent" {
		t.Errorf("ReplayPath = %q", got)
	}
}

func TestMatchAllocs(t *testing.T) {
	path := []byte("/openai/v1/chat/completions")
	if n := testing.AllocsPerRun(100, func() { _ = Match(path) }); n != 0 {
		t.Errorf("Match allocates %v times; want 0", n)
	}
}

// BenchmarkMatch routes the paths every request of an agent has: the
// proxy matches each request's path several times.
func BenchmarkMatch(b *testing.B) {
	paths := [][]byte{[]byte("/v1/chat/completions"), []byte("/v1/relay"), []byte("/v1beta/models/gemini-2.5-pro:streamGenerateContent")}
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range paths {
			Match(p)
		}
	}
}
