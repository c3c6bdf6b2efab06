package inject

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
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

// TestCollapseOllama: the repeats of a loop whose calls carry no id and
// whose results name their tool are removed with their results; a cycle
// keeps its first instance of each call, and every result left still
// follows its call.
func TestCollapseOllama(t *testing.T) {
	// turn is one assistant turn and its results; with read, a second call
	// whose result comes first, paired by its tool_name.
	turn := func(cmd string, read bool) string {
		if !read {
			return `{"role":"assistant","content":"Trying.","tool_calls":[{"function":{"name":"bash","arguments":{"command":"` + cmd + `"}}}]},` +
				`{"role":"tool","tool_name":"bash","content":"make: *** No rule to make target. Stop.\nexit code 2"}`
		}
		return `{"role":"assistant","content":"Trying.","tool_calls":[{"function":{"name":"bash","arguments":{"command":"` + cmd + `"}}},{"function":{"name":"read_file","arguments":{"path":"Makefile"}}}]},` +
			`{"role":"tool","tool_name":"read_file","content":"all: build"},{"role":"tool","tool_name":"bash","content":"make: *** No rule to make target. Stop.\nexit code 2"}`
	}
	for _, tt := range []struct {
		name      string
		cmds      []string
		read      bool
		wantTurns int
	}{
		{"repetition", []string{"make build", "make build", "make build", "make build", "make build"}, false, 1},
		{"cycle of two-call turns, results in another order", []string{"make a", "make b", "make a", "make b", "make a", "make b"}, true, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parts := make([]string, len(tt.cmds))
			for i, c := range tt.cmds {
				parts[i] = turn(c, tt.read)
			}
			body := []byte(`{"model":"qwen3","messages":[{"role":"user","content":"Fix the build."},` + strings.Join(parts, ",") + `],"options":{"num_ctx":8192}}`)
			in := stableInjector(t, Config{})
			out, c, err := in.CollapseOllama(body, loopCalls(t, wireapi.Ollama, body))
			if err != nil {
				t.Fatal(err)
			}
			msgs := gjson.GetBytes(out, "messages").Array()
			turns := 0
			pending := map[string]int{}
			for _, m := range msgs {
				switch m.Get("role").String() {
				case "assistant":
					turns++
					pending = map[string]int{}
					for _, tc := range m.Get("tool_calls").Array() {
						pending[tc.Get("function.name").String()]++
					}
				case "tool":
					if pending[m.Get("tool_name").String()]--; pending[m.Get("tool_name").String()] < 0 {
						t.Errorf("a %s result without its call in %s", m.Get("tool_name"), out)
					}
				}
			}
			if turns != tt.wantTurns || c.Turns != len(tt.cmds)-tt.wantTurns || !gjson.ValidBytes(out) || gjson.GetBytes(out, "options.num_ctx").Int() != 8192 {
				t.Errorf("%d turns left, %+v; want %d:\n%s", turns, c, tt.wantTurns, out)
			}
		})
	}
}
