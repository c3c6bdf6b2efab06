package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestNonStreamedDegenerationIsCut sends a whole answer that is a loose
// cycle recorded from llama-server (repeat_penalty 1.1) on each wire API:
// the text is cut where the repetition was proven, what followed it is
// dropped, and the answer says it ended there.
func TestNonStreamedDegenerationIsCut(t *testing.T) {
	raw, err := os.ReadFile("../inspect/testdata/stream/loop_penalty_deploy_steps_1_1.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, loop, _ := bytes.Cut(raw, []byte("\n\n"))
	text, _ := json.Marshal(string(loop))
	tests := []struct {
		name, path, req, answer string
		textPath                string
		want                    map[string]string // paths of the cut answer and their values
		gone                    []string          // paths dropped after the cut
	}{
		{"chat", "/v1/chat/completions", loopingHistory(1, false),
			`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
				string(text) + `},"finish_reason":"length"}]}`,
			"choices.0.message.content", map[string]string{"choices.0.finish_reason": "stop"}, nil},
		{"responses", "/v1/responses", responsesHistory(1, false),
			`{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[` +
				`{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":` + string(text) + `,"annotations":[]},{"type":"output_text","text":"more","annotations":[]}]},` +
				`{"id":"fc_1","type":"function_call","call_id":"call_1","name":"bash","arguments":"{}","status":"completed"}]}`,
			"output.0.content.0.text", map[string]string{"output.0.status": "incomplete", "status": "completed"},
			[]string{"output.1", "output.0.content.1"}},
		{"anthropic", "/v1/messages", anthropicHistory(1, false),
			`{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":` + string(text) +
				`},{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1500}}`,
			"content.0.text", map[string]string{"stop_reason": "end_turn"}, []string{"content.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, tt.answer)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			resp, err := newClient().Post(base+tt.path, "application/json", strings.NewReader(tt.req))
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !gjson.ValidBytes(answer) {
				t.Fatalf("answer is not JSON: %s", answer)
			}
			got := gjson.GetBytes(answer, tt.textPath).String()
			if len(got) == 0 || len(got) >= len(loop) || !strings.HasPrefix(string(loop), got) {
				t.Errorf("%s is %d bytes; want a proper prefix of the %d-byte degenerate text", tt.textPath, len(got), len(loop))
			}
			for path, want := range tt.want {
				if v := gjson.GetBytes(answer, path).String(); v != want {
					t.Errorf("%s = %q; want %q", path, v, want)
				}
			}
			for _, path := range tt.gone {
				if gjson.GetBytes(answer, path).Exists() {
					t.Errorf("%s is still in the answer; want it dropped after the cut", path)
				}
			}
		})
	}
}
