package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
)

func TestPathSet(t *testing.T) {
	ps := newPathSet(DefaultPassthrough)
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/v1/chat/completions", true},
		{"/openai/v1/chat/completions", true},
		{"/chat/completions", true},
		{"/v1/responses", true},
		{"/v1/models", true},
		{"/v1/models/gpt-4.1", true},
		{"/api/tags", true},
		{"/api/show", true},
		{"/v1/stream/conv-1", true},
		{"/api/delete", false},
		{"/api/pull", false},
		{"/api/create", false},
		{"/api/push", false},
		{"/v1/files", false},
		{"/v1/files/file-1/content", false},
		{"/v1/batches", false},
		{"/v1/fine_tuning/jobs", false},
		{"/v1/models/gpt-4.1/extra", false},
		{"/v1/organization/admin_api_keys", false},
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent", true},
		{"/v1beta/models/gemini-2.5-pro:countTokens", true},
		{"/v1beta/models", true},
		{"/v1internal:generateContent", true},
		{"/v1beta/files", false},
		{"/v1beta/cachedContents", false},
		{"/v1beta/tunedModels/t1", false},
		{"/", false},
		{"/completions", false},
	} {
		if got := ps.has([]byte(tt.path)); got != tt.want {
			t.Errorf("passthrough has %s = %v; want %v", tt.path, got, tt.want)
		}
	}
}

// TestOperatorKeyOnlyOnPassthrough: with [upstream] api_key set, the
// guarded APIs and the model listing reach the upstream with the
// operator's key; Ollama's /api/delete (or a file upload) reaches it only
// with the client's own credentials, and is refused 401 with an
// OpenAI-shaped error when the client sent none.
func TestOperatorKeyOnlyOnPassthrough(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // path -> Authorization
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen[r.URL.Path] = r.Header.Get("Authorization")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			io.WriteString(w, chatAnswer)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Upstream.APIKey = "sk-operator" })
	send := func(method, path, auth, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, b := doRequest(t, req)
		return resp.StatusCode, b
	}
	for _, tt := range []struct {
		method, path, auth string
		status             int
		upstreamAuth       string // "" : not forwarded
	}{
		{"POST", "/v1/chat/completions", "", 200, "Bearer sk-operator"},
		{"POST", "/v1/chat/completions", "Bearer sk-client", 200, "Bearer sk-operator"},
		{"GET", "/v1/models", "", 200, "Bearer sk-operator"},
		{"GET", "/api/tags", "", 200, "Bearer sk-operator"},
		{"DELETE", "/api/delete", "", 401, ""},
		{"DELETE", "/api/delete", "Bearer sk-client", 200, "Bearer sk-client"},
		{"POST", "/api/pull", "", 401, ""},
		{"POST", "/v1/files", "", 401, ""},
		{"POST", "/v1/files", "Bearer sk-client", 200, "Bearer sk-client"},
	} {
		mu.Lock()
		clear(seen)
		mu.Unlock()
		body := `{"model":"m"}`
		if strings.HasSuffix(tt.path, "/chat/completions") {
			body = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		}
		status, got := send(tt.method, tt.path, tt.auth, body)
		mu.Lock()
		auth, forwarded := seen[tt.path]
		mu.Unlock()
		switch {
		case status != tt.status:
			t.Errorf("%s %s (client auth %q): %d %s; want %d", tt.method, tt.path, tt.auth, status, got, tt.status)
		case tt.upstreamAuth == "" && forwarded:
			t.Errorf("%s %s without credentials reached the upstream with %q; want it refused", tt.method, tt.path, auth)
		case tt.upstreamAuth == "" && (gjson.Get(got, "error.code").String() != "credentials_required" || !gjson.Get(got, "error.type").Exists()):
			t.Errorf("%s %s refused with %s; want an OpenAI-shaped error", tt.method, tt.path, got)
		case tt.upstreamAuth != "" && auth != tt.upstreamAuth:
			t.Errorf("%s %s (client auth %q) reached the upstream with %q; want %q", tt.method, tt.path, tt.auth, auth, tt.upstreamAuth)
		}
	}
}

// FuzzPathSet: any path a client sends is matched without a panic, and a
// path that ends with a listed one matches, whatever comes before it.
func FuzzPathSet(f *testing.F) {
	for _, p := range []string{"/v1/models", "/", "", "//", "/a//b", "/v1/models/x/", "v1", "/*/*"} {
		f.Add(p)
	}
	ps := newPathSet(DefaultPassthrough)
	f.Fuzz(func(t *testing.T, path string) {
		ps.has([]byte(path))
		if !ps.has([]byte(strings.TrimRight(path, "/") + "/v1/models")) {
			t.Errorf("%q + /v1/models does not match", path)
		}
	})
}

// FuzzSafeStreamID: an id safeStreamID lets through is one path segment
// that no decoding or resolving changes.
func FuzzSafeStreamID(f *testing.F) {
	for _, id := range []string{"c1", ".", "..", "../x", "%2e", "a:b", "a.b"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if !safeStreamID([]byte(id)) {
			return
		}
		if id == "." || id == ".." || strings.ContainsAny(id, "/%?#\\ ") || url.PathEscape(id) != id {
			t.Errorf("safeStreamID(%q) = true", id)
		}
	})
}
