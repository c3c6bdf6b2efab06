package inject

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestTerminateOllama(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		give       string
		wantStatus int
		wantType   string
		wantLines  int // NDJSON lines; 1 for a single object
	}{
		{"no stream member streams", Config{}, `{"model":"qwen3","messages":[]}`, 200, ContentNDJSON, 2},
		{"stream true", Config{}, `{"model":"qwen3","stream":true,"messages":[]}`, 200, ContentNDJSON, 2},
		{"stream false", Config{}, `{"model":"qwen3","stream":false,"messages":[]}`, 200, contentJSON, 1},
		{"error", Config{TerminateAs: AsError}, `{"model":"qwen3","messages":[]}`, 422, contentJSON, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := stableInjector(t, tt.cfg)
			res, err := in.TerminateOllama([]byte(tt.give), Loop{Verdict: readVerdict(t, "tool_repetition")})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.wantStatus || header(res, "Content-Type") != tt.wantType {
				t.Fatalf("status %d %q; want %d %q", res.Status, header(res, "Content-Type"), tt.wantStatus, tt.wantType)
			}
			lines := bytes.Split(bytes.TrimSuffix(res.Body, []byte("\n")), []byte("\n"))
			if len(lines) != tt.wantLines {
				t.Fatalf("%d lines; want %d:\n%s", len(lines), tt.wantLines, res.Body)
			}
			if tt.cfg.TerminateAs == AsError {
				var e struct{ Error string }
				if err := json.Unmarshal(res.Body, &e); err != nil || !strings.HasPrefix(e.Error, "LOOP_DETECTED") {
					t.Fatalf("error body %s (%v)", res.Body, err)
				}
				return
			}
			var text strings.Builder
			for i, l := range lines {
				var m struct {
					Model      string
					CreatedAt  string `json:"created_at"`
					Message    struct{ Role, Content string }
					Done       bool
					DoneReason string `json:"done_reason"`
				}
				if err := json.Unmarshal(l, &m); err != nil {
					t.Fatalf("line %d %s: %v", i, l, err)
				}
				last := i == len(lines)-1
				if m.Model != "qwen3" || m.CreatedAt != "2025-10-20T22:40:00Z" || m.Message.Role != "assistant" || m.Done != last ||
					(last && m.DoneReason != "stop") {
					t.Errorf("line %d = %s", i, l)
				}
				text.WriteString(m.Message.Content)
			}
			if !strings.HasPrefix(text.String(), "LOOP_DETECTED: ") {
				t.Errorf("content %q", text.String())
			}
		})
	}
}

// TestApplyOllama: Ollama's messages are chat's (role, string content), so
// chat's Apply places warnings in them, whatever carries the tool results.
func TestApplyOllama(t *testing.T) {
	body := []byte(`{"model":"qwen3","messages":[{"role":"user","content":"go"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"ls","arguments":{"path":"."}}}]},{"role":"tool","tool_name":"ls","content":"a.go"}],"options":{"num_ctx":8192}}`)
	for _, p := range []Placement{Auto, Tool, User, System} {
		t.Run(string(p), func(t *testing.T) {
			in := stableInjector(t, Config{Placement: p})
			res, err := in.Apply(body, Edit{Warnings: []Loop{{Verdict: readVerdict(t, "tool_repetition")}}})
			if err != nil {
				t.Fatal(err)
			}
			var req struct {
				Messages []map[string]any
				Options  map[string]any
			}
			if err := json.Unmarshal(res.Body, &req); err != nil {
				t.Fatalf("%v: %s", err, res.Body)
			}
			if req.Options["num_ctx"] != 8192.0 || !bytes.Contains(res.Body, []byte(`"arguments":{"path":"."}`)) {
				t.Errorf("options or calls changed: %s", res.Body)
			}
			if !bytes.Contains(res.Body, []byte("loop")) || len(res.Body) <= len(body) {
				t.Errorf("no warning in %s", res.Body)
			}
		})
	}
}
