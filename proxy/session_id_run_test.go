package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/sjson"
)

// A run sent without a session id is one session on every guarded API: its
// first request (no assistant turn yet), its second (one turn) and its
// third (two turns) get one derived key, though runs of the same prompt on
// the other APIs went before it through the same loopguard. The first
// assistant turn tells two runs apart, but never splits a run's first
// request from the rest.
func TestDerivedKeyIsOneSessionPerRun(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x"}`)
	}))
	t.Cleanup(up.Close)
	// One opening on every API: model, system prompt and task alike.
	sameModel := func(history func(int, bool) string) func(int, bool) string {
		return func(n int, stream bool) string {
			b, _ := sjson.Set(history(n, stream), "model", "m")
			return b
		}
	}
	apis := []struct {
		name, path string
		history    func(n int, stream bool) string
	}{
		{"chat", "/v1/chat/completions", sameModel(loopingHistory)},
		{"responses", "/v1/responses", sameModel(responsesHistory)},
		{"anthropic", "/v1/messages", sameModel(anthropicHistory)},
	}
	orders := []struct {
		name  string
		order []int // indexes into apis, in the order their runs go
	}{
		{"chat first", []int{0, 1, 2}},
		{"anthropic first", []int{2, 1, 0}},
		{"responses first", []int{1, 0, 2}},
	}
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			seen := map[string]string{} // key -> the API whose run has it
			for _, i := range o.order {
				api := apis[i]
				var keys []string
				for n := range 3 {
					resp, _ := post(t, base+api.path, "", api.history(n, false))
					keys = append(keys, resp.Header.Get(HeaderSession))
				}
				if !strings.HasPrefix(keys[0], "h:") {
					t.Fatalf("%s request 1: session %q; want a derived key", api.name, keys[0])
				}
				for n, k := range keys[1:] {
					if k != keys[0] {
						t.Errorf("%s request %d: session %q; want %q, the first request's (all: %q)", api.name, n+2, k, keys[0], keys)
					}
				}
				if other, ok := seen[keys[0]]; ok {
					t.Errorf("%s run: session %q, the %s run's", api.name, keys[0], other)
				}
				seen[keys[0]] = api.name
			}
		})
	}
}
