package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/policy"
)

// TestPassiveModesChangeNoAnswer: in policy modes shadow and off loopguard
// changes nothing, answers included: a degenerate answer, streamed or not,
// reaches the client as the upstream sent it. In enforce it is cut.
func TestPassiveModesChangeNoAnswer(t *testing.T) {
	var stream strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&stream, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"I will now read the file to see the error. "},"finish_reason":null}]}`+"\n\n")
	}
	stream.WriteString("data: [DONE]\n\n")
	plain := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("I will now read the file to see the error. ", 300) + `"},"finish_reason":"stop"}]}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, stream.String())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, plain)
	}))
	t.Cleanup(up.Close)
	for _, mode := range []string{"shadow", "off", "enforce"} {
		for _, streamed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", mode, streamed), func(t *testing.T) {
				_, base := startProxy(t, func(c *Config) {
					c.Upstream.URL = up.URL
					c.Policy.Mode = policy.Mode(mode)
				})
				body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, streamed)
				_, got := postChat(t, base, "mode-"+mode, body)
				want := plain
				if streamed {
					want = stream.String()
				}
				if changed := got != want; changed != (mode == "enforce") {
					t.Errorf("answer changed = %v (%d of %d bytes); want %v", changed, len(got), len(want), mode == "enforce")
				}
			})
		}
	}
}
