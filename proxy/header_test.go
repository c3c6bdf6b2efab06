package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestUpstreamDatePassesThrough: the upstream's Date is end-to-end; loopguard
// writes no Date of its own, so dropping it would leave the client none.
func TestUpstreamDatePassesThrough(t *testing.T) {
	const date = "Mon, 02 Jan 2006 15:04:05 GMT"
	tests := []struct {
		name, path, contentType, body string
	}{
		{"pass-through", "/v1/models", "application/json", `{"data":[]}`},
		{"chat, not streamed", "/v1/chat/completions", "application/json", `{"choices":[]}`},
		{"chat, streamed", "/v1/chat/completions", "text/event-stream", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", date)
				w.Header().Set("Content-Type", tt.contentType)
				io.WriteString(w, tt.body)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			resp, err := newClient().Post(base+tt.path, "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := resp.Header.Values("Date"); len(got) != 1 || got[0] != date {
				t.Errorf("Date = %q; want [%q]", got, date)
			}
			if string(body) != tt.body {
				t.Errorf("body = %q; want %q", body, tt.body)
			}
		})
	}
}
