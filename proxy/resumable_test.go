package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// resumableUpstream streams a degenerate answer for chat requests and
// resumes, and answers DELETE /…/stream/<id> with deleteStatus, recording
// each DELETE.
type resumableUpstream struct {
	mu      sync.Mutex
	deletes []recorded
	deleted chan struct{}
}

func startResumableUpstream(t *testing.T, deleteStatus int) (*resumableUpstream, string) {
	t.Helper()
	ru := &resumableUpstream{deleted: make(chan struct{}, 16)}
	degenerate := degenerateSSE(t, make(chan int, 16))
	up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			ru.mu.Lock()
			ru.deletes = append(ru.deletes, recorded{method: r.Method, uri: r.RequestURI, header: r.Header.Clone()})
			ru.mu.Unlock()
			w.WriteHeader(deleteStatus)
			ru.deleted <- struct{}{}
			return
		}
		if r.Header.Get("X-Conversation-Id") == "slow" {
			slowSSE(w, r)
			return
		}
		degenerate(w, r)
	})
	return ru, up.URL
}

// slowSSE streams a healthy answer slowly, so that a client can hang up
// before anything is cut.
func slowSSE(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 0; i < 500; i++ {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word%d \"}}]}\n\n", i)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitDeletes waits until n DELETEs arrived, then a little longer for any
// unexpected further one, and returns them.
func (ru *resumableUpstream) waitDeletes(t *testing.T, n int) []recorded {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-ru.deleted:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d DELETEs reached the upstream within 5s; want %d", i, n)
		}
	}
	select {
	case <-ru.deleted:
	case <-time.After(200 * time.Millisecond):
	}
	ru.mu.Lock()
	defer ru.mu.Unlock()
	return append([]recorded(nil), ru.deletes...)
}

// sendStream makes one request through the proxy and reads the answer,
// or hangs up after its first event.
func sendStream(t *testing.T, base, method, path string, hdr map[string]string, hangUp bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var body *strings.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	} else {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequestWithContext(ctx, method, base+path, body)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		b.WriteString(line)
		if err != nil || hangUp && strings.HasPrefix(line, "data:") {
			return b.String()
		}
	}
}

func TestCutStopsResumableStream(t *testing.T) {
	tests := []struct {
		name, base     string // base: the upstream URL's path
		method, path   string
		hdr            map[string]string
		apiKey         string
		wantURI        string
		wantAuth       string
		hangUp         bool
		wantDeleteSent bool
	}{
		{name: "cut", method: "POST", path: "/v1/chat/completions",
			hdr:     map[string]string{"X-Conversation-Id": "conv-1:a.b_C", "Authorization": "Bearer client", "X-Api-Key": "k"},
			wantURI: "/v1/stream/conv-1:a.b_C", wantAuth: "Bearer client", wantDeleteSent: true},
		{name: "cut under a base path", base: "/llama/v1", method: "POST", path: "/v1/chat/completions",
			hdr: map[string]string{"X-Conversation-Id": "c2"}, apiKey: "sk-up",
			wantURI: "/llama/v1/stream/c2", wantAuth: "Bearer sk-up", wantDeleteSent: true},
		{name: "resumed stream is inspected and cut", method: "GET", path: "/v1/stream/c3",
			hdr:     map[string]string{"Authorization": "Bearer client"},
			wantURI: "/v1/stream/c3", wantAuth: "Bearer client", wantDeleteSent: true},
		{name: "client hang-up leaves it running", method: "POST", path: "/v1/chat/completions",
			hdr: map[string]string{"X-Conversation-Id": "slow"}, hangUp: true},
		{name: "no conversation id", method: "POST", path: "/v1/chat/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ru, url := startResumableUpstream(t, http.StatusNoContent)
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = url + tt.base; c.Upstream.APIKey = tt.apiKey })
			answer := sendStream(t, base, tt.method, tt.path, tt.hdr, tt.hangUp)
			if cut := strings.Contains(answer, ": loopguard cut"); cut == tt.hangUp {
				t.Fatalf("cut = %v; want %v: %q", cut, !tt.hangUp, answer[max(0, len(answer)-300):])
			}
			n := 0
			if tt.wantDeleteSent {
				n = 1
			}
			dels := ru.waitDeletes(t, n)
			if len(dels) != n {
				t.Fatalf("%d DELETEs reached the upstream; want %d", len(dels), n)
			}
			if n == 0 {
				return
			}
			d := dels[0]
			if d.uri != tt.wantURI || d.header.Get("Authorization") != tt.wantAuth || d.header.Get("X-Api-Key") != tt.hdr["X-Api-Key"] {
				t.Errorf("DELETE %s with Authorization %q, X-Api-Key %q; want %s with %q, %q", d.uri,
					d.header.Get("Authorization"), d.header.Get("X-Api-Key"), tt.wantURI, tt.wantAuth, tt.hdr["X-Api-Key"])
			}
		})
	}
}

// TestResumableStopRemembersUnsupported: an upstream that answers 404 or
// 405 to the DELETE is asked once and then left alone.
func TestResumableStopRemembersUnsupported(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusMethodNotAllowed} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			ru, url := startResumableUpstream(t, status)
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = url })
			for i := range 3 {
				answer := sendStream(t, base, http.MethodPost, "/v1/chat/completions", map[string]string{"X-Conversation-Id": "c"}, false)
				if !strings.Contains(answer, ": loopguard cut") {
					t.Fatalf("stream %d was not cut", i)
				}
				if i == 0 {
					ru.waitDeletes(t, 1) // the answer is remembered before the next cut
				}
			}
			if dels := ru.waitDeletes(t, 0); len(dels) != 1 {
				t.Errorf("%d DELETEs after 3 cuts; want 1", len(dels))
			}
		})
	}
}

// TestResumeDeletePassesThrough: a client's DELETE of a stream goes
// through unchanged.
func TestResumeDeletePassesThrough(t *testing.T) {
	ru, url := startResumableUpstream(t, http.StatusNoContent)
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = url })
	req, _ := http.NewRequest(http.MethodDelete, base+"/v1/stream/c9", nil)
	req.Header.Set("Authorization", "Bearer client")
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	dels := ru.waitDeletes(t, 1)
	if resp.StatusCode != http.StatusNoContent || len(dels) != 1 || dels[0].uri != "/v1/stream/c9" || dels[0].header.Get("Authorization") != "Bearer client" {
		t.Errorf("status %d, upstream got %+v; want the DELETE passed through and its 204", resp.StatusCode, dels)
	}
}

// TestCutStopsResumableStreamOnItsOwnUpstream: with upstream.anthropic_url
// set, the DELETE that stops an Anthropic client's cut stream, and the
// client's credentials it carries, go to the upstream the stream came
// from; the other upstream sees nothing of them.
func TestCutStopsResumableStreamOnItsOwnUpstream(t *testing.T) {
	tests := []struct {
		name, method, path string
	}{
		{"resumed stream", http.MethodGet, "/v1/stream/c7"},
		{"stream with a conversation id", http.MethodPost, "/v1/chat/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			anthropic, anthropicURL := startResumableUpstream(t, http.StatusNoContent)
			other, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNoContent)
			})
			_, base := startProxy(t, func(c *Config) {
				c.Upstream.URL = other.URL
				c.Upstream.AnthropicURL = anthropicURL
			})
			hdr := map[string]string{"anthropic-version": "2023-06-01", "X-Api-Key": "sk-ant-secret",
				"X-Conversation-Id": "c7"}
			if tt.method == http.MethodGet {
				delete(hdr, "X-Conversation-Id")
			}
			if answer := sendStream(t, base, tt.method, tt.path, hdr, false); !strings.Contains(answer, ": loopguard cut") {
				t.Fatalf("the stream was not cut: %q", answer[max(0, len(answer)-300):])
			}
			dels := anthropic.waitDeletes(t, 1)
			if len(dels) != 1 || dels[0].uri != "/v1/stream/c7" || dels[0].header.Get("X-Api-Key") != "sk-ant-secret" {
				t.Errorf("the Anthropic upstream got DELETEs %+v; want one of /v1/stream/c7 with its key", dels)
			}
			select {
			case r := <-got:
				t.Errorf("the other upstream got %s %s (X-Api-Key %q); want nothing", r.method, r.uri, r.header.Get("X-Api-Key"))
			default:
			}
		})
	}
}

// TestResumableUnsafeIDSendsNoDelete: a conversation id that is a
// dot-segment, or holds anything but letters, digits and -_.:, could make
// the DELETE name another resource once an upstream (or nginx in front of
// it) decodes and resolves its path: none is sent.
func TestResumableUnsafeIDSendsNoDelete(t *testing.T) {
	for _, id := range []string{".", "..", "../../admin", "a/b", "conv 1", "%2e%2e", "a?b", "a#b", "é"} {
		t.Run(id, func(t *testing.T) {
			ru, url := startResumableUpstream(t, http.StatusNoContent)
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = url })
			answer := sendStream(t, base, http.MethodPost, "/v1/chat/completions", map[string]string{"X-Conversation-Id": id}, false)
			if !strings.Contains(answer, ": loopguard cut") {
				t.Fatal("the stream was not cut")
			}
			if dels := ru.waitDeletes(t, 0); len(dels) != 0 {
				t.Errorf("DELETEs %+v reached the upstream; want none", dels)
			}
		})
	}
}
