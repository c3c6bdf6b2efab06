package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/proxy"
)

// startProxy runs loopguard in front of upstream on a free loopback port
// and returns its base URL (no /v1). It shuts down when the test ends.
func startProxy(t *testing.T, upstream string) string {
	t.Helper()
	cfg := proxy.DefaultConfig()
	cfg.Upstream.URL = upstream
	srv, err := proxy.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("proxy Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("proxy Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// hopByHop are connection-level headers (RFC 9110 §7.6.1) that a proxy
// must not forward; the comparisons leave them out.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
}

// sentHeaders are the end-to-end request headers the raw client sends; the
// upstream must receive each one unchanged.
var sentHeaders = map[string]string{
	"Authorization":       "Bearer sk-e2e-secret",
	"Content-Type":        "application/json",
	"User-Agent":          "loopguard-e2e/1.0",
	"Openai-Organization": "org-e2e",
	"X-Custom-Trace":      "abc, def",
	"X-Session-Id":        "e2e-session",
}

// rawExchange is what a raw HTTP client saw.
type rawExchange struct {
	status int
	header http.Header
	body   []byte
}

// rawDo sends one request with sentHeaders and reads the whole answer.
func rawDo(t *testing.T, method, url, body string) rawExchange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sentHeaders {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: newTransport(t)}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return rawExchange{resp.StatusCode, resp.Header, b}
}

// lastDone waits until the fake has finished n exchanges and returns the
// last one.
func lastDone(t *testing.T, fake *fakellm.Server, n int) fakellm.Exchange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	xs, err := fake.Wait(ctx, func(xs []fakellm.Exchange) bool { return len(xs) >= n && xs[n-1].Done })
	if err != nil {
		t.Fatalf("waiting for exchange %d: %v (have %d)", n, err, len(xs))
	}
	return xs[n-1]
}

// checkTransparent asserts that the client got exactly what the fake sent
// (status, end-to-end headers, body bytes) and the fake got exactly what the
// client sent (method, path, query, headers, body bytes).
func checkTransparent(t *testing.T, got rawExchange, x fakellm.Exchange, method, path, query, body string, chat bool) {
	t.Helper()
	if got.status != x.Status {
		t.Errorf("status through proxy = %d; upstream sent %d", got.status, x.Status)
	}
	if !bytes.Equal(got.body, x.Body) {
		t.Errorf("body through proxy differs from the upstream's bytes:\ngot  %q\nwant %q", got.body, x.Body)
	}
	for k, vs := range x.Header {
		if hopByHop[k] {
			continue
		}
		if g := got.header.Values(k); strings.Join(g, "\x00") != strings.Join(vs, "\x00") {
			t.Errorf("response header %s = %q; upstream sent %q", k, g, vs)
		}
	}
	for k := range got.header {
		// Date comes from the upstream's net/http on the wire; loopguard
		// adds only its own X-Loopguard-* headers.
		if _, ok := x.Header[k]; ok || k == "Date" || strings.HasPrefix(k, "X-Loopguard-") {
			continue
		}
		// Streams get X-Accel-Buffering: no so that an nginx in front does
		// not hold events back (docs/streams.md: buffering).
		if k == "X-Accel-Buffering" && got.header.Get(k) == "no" && x.Stream {
			continue
		}
		{
			t.Errorf("response header %s: %q added on the way", k, got.header.Values(k))
		}
	}
	r := x.Request
	if r.Method != method || r.Path != path || r.RawQuery != query {
		t.Errorf("upstream got %s %s?%s; want %s %s?%s", r.Method, r.Path, r.RawQuery, method, path, query)
	}
	if string(r.Body) != body {
		t.Errorf("upstream got body %q; client sent %q", r.Body, body)
	}
	for k, v := range sentHeaders {
		if g := r.Header.Values(k); len(g) != 1 || g[0] != v {
			t.Errorf("upstream got request header %s = %q; client sent %q", k, g, v)
		}
	}
	for k := range r.Header {
		if hopByHop[k] && k != "Connection" {
			t.Errorf("hop-by-hop request header %s forwarded", k)
		}
	}
	if ae := r.Header.Get("Accept-Encoding"); chat && ae != "" && ae != "identity" {
		// Inspected streams must come back uncompressed (docs/streams.md: compression).
		t.Errorf("chat request forwarded with Accept-Encoding %q; want identity or none", ae)
	}
}

// TestProxyTransparentChat is the core promise: for every dialect, shape
// and mode, a healthy exchange passes through loopguard byte for byte, and
// real clients parse it exactly as they parse the upstream directly.
func TestProxyTransparentChat(t *testing.T) {
	node := nodeOrSkip(t)
	for _, d := range fakellm.Dialects {
		for _, sc := range scenarios(d) {
			for _, stream := range []bool{true, false} {
				mode := map[bool]string{true: "stream", false: "json"}[stream]
				t.Run(d.String()+"/"+sc.name+"/"+mode, func(t *testing.T) {
					fake := fakellm.Start(t, fakellm.Script{Loop: true, Responses: []fakellm.Response{sc.resp}})
					base := startProxy(t, fake.URL())

					body := chatRequestJSON(stream)
					got := rawDo(t, http.MethodPost, base+"/v1/chat/completions?api-version=2024-06-01", body)
					x := lastDone(t, fake, 1)
					checkTransparent(t, got, x, http.MethodPost, "/v1/chat/completions", "api-version=2024-06-01", body, true)

					clients := map[string]clientFunc{"go-openai": goOpenAI, "openai-go": officialGo}
					if node != "" {
						clients["node-openai"] = func(t *testing.T, base string, stream bool) outcome { return nodeOpenAI(t, node, base, stream) }
					}
					n := 1
					for name, c := range clients {
						checkOutcome(t, name+" via loopguard", c(t, base, stream), sc, stream)
						n++
						x := lastDone(t, fake, n)
						if x.Request.Stream != stream {
							t.Errorf("%s: upstream saw stream=%v", name, x.Request.Stream)
						}
					}
				})
			}
		}
	}
}

// TestProxyUpstreamWithV1 checks that a base URL ending in /v1 does not
// double the prefix.
func TestProxyUpstreamWithV1(t *testing.T) {
	fake := fakellm.Start(t, fakellm.Script{Loop: true, Responses: []fakellm.Response{{Content: "ok"}}})
	base := startProxy(t, fake.URL()+"/v1")
	got := rawDo(t, http.MethodPost, base+"/v1/chat/completions", chatRequestJSON(false))
	x := lastDone(t, fake, 1)
	checkTransparent(t, got, x, http.MethodPost, "/v1/chat/completions", "", chatRequestJSON(false), true)
}

// TestProxyPassThrough covers the routes loopguard does not inspect.
func TestProxyPassThrough(t *testing.T) {
	responses, err := os.ReadFile(filepath.Join("..", "fakellm", "testdata", "wire-samples", "openai-responses-function-call.sse"))
	if err != nil {
		t.Fatal(err)
	}
	anthropic, err := os.ReadFile(filepath.Join("..", "fakellm", "testdata", "wire-samples", "anthropic-messages-tool-use.sse"))
	if err != nil {
		t.Fatal(err)
	}
	fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
		{Match: func(r *fakellm.Request) bool { return r.Path == "/v1/responses" },
			Response: fakellm.Response{RawEvents: splitEvents(responses)}},
		{Match: func(r *fakellm.Request) bool { return r.Path == "/v1/messages" },
			Response: fakellm.Response{RawEvents: splitEvents(anthropic), Header: http.Header{"Anthropic-Request-Id": {"req_1"}}}},
	}})
	base := startProxy(t, fake.URL())
	big := `{"model":"e","input":"` + strings.Repeat("x", 300<<10) + `"}`
	tests := []struct{ name, method, path, query, body string }{
		{"models", http.MethodGet, "/v1/models", "", ""},
		{"embeddings large", http.MethodPost, "/v1/embeddings", "", big},
		{"responses stream", http.MethodPost, "/v1/responses", "", `{"model":"m","stream":true,"input":"hi"}`},
		{"anthropic stream", http.MethodPost, "/v1/messages", "", `{"model":"c","stream":true,"max_tokens":5,"messages":[]}`},
		{"echo odd path", http.MethodPut, "/v1/files/a%2Fb/content", "x=1&x=2&y=%20", "payload \x00 bytes"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := base + tt.path
			if tt.query != "" {
				url += "?" + tt.query
			}
			got := rawDo(t, tt.method, url, tt.body)
			x := lastDone(t, fake, i+1)
			checkTransparent(t, got, x, tt.method, tt.path, tt.query, tt.body, false)
		})
	}
}

// splitEvents cuts an SSE file after each blank line, so a replay flushes
// event by event as a server would.
func splitEvents(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			out = append(out, b)
			break
		}
		out = append(out, b[:i+2])
		b = b[i+2:]
	}
	return out
}

// TestProxyReplaysWireSamples sends each re-typed real server stream,
// quirks and errors included, through the chat route and expects the same
// bytes back.
func TestProxyReplaysWireSamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "fakellm", "testdata", "wire-samples", "*.sse"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no wire samples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			sample, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			fake := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{{RawEvents: splitEvents(sample), Delay: time.Millisecond}}})
			base := startProxy(t, fake.URL())
			body := chatRequestJSON(true)
			got := rawDo(t, http.MethodPost, base+"/v1/chat/completions", body)
			x := lastDone(t, fake, 1)
			if !bytes.Equal(x.Body, sample) {
				t.Fatalf("fake sent %q; want the sample", x.Body)
			}
			checkTransparent(t, got, x, http.MethodPost, "/v1/chat/completions", "", body, true)
		})
	}
}

// TestProxyClientDisconnectCancelsUpstream: when the agent hangs up
// mid-stream, loopguard must close its upstream connection at once so the
// model server stops generating (docs/streams.md: a client that leaves):
// well before the upstream's next event when it is silent between events.
func TestProxyClientDisconnectCancelsUpstream(t *testing.T) {
	tests := []struct {
		name string
		give fakellm.Response
	}{
		{"endless", fakellm.Response{Dialect: fakellm.VLLM, Content: "step one. step two. ", NeverEnd: true, Delay: 5 * time.Millisecond}},
		{"slow finite", fakellm.Response{Dialect: fakellm.LlamaCpp, Content: strings.Repeat("word ", 200), ChunkSize: 5, Delay: 20 * time.Millisecond}},
		{"silent between events", fakellm.Response{Dialect: fakellm.OpenAI, Content: "a b c d e f g h", ChunkSize: 2, Delay: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{tt.give}})
			base := startProxy(t, fake.URL())
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := chatRequestJSON(true)
			req := "POST /v1/chat/completions HTTP/1.1\r\nHost: loopguard\r\nContent-Type: application/json\r\n" +
				"Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(testTimeout))
			br := bufio.NewReader(conn)
			for events := 0; events < 2; {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("reading the stream: %v", err)
				}
				if strings.HasPrefix(line, "data: ") {
					events++
				}
			}
			hungUp := time.Now()
			conn.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			xs, err := fake.Wait(ctx, func(xs []fakellm.Exchange) bool { return len(xs) == 1 && xs[0].Done })
			if err != nil {
				t.Fatalf("upstream stream still running 5s after the client left: %v", err)
			}
			x := xs[0]
			if !x.PeerClosed {
				t.Fatalf("upstream stream ended without a peer close: %+v", x)
			}
			// Room for a loaded machine under -race, and still well before
			// the silent upstream's next event (2 s).
			if lag := x.ClosedAt.Sub(hungUp); lag > 500*time.Millisecond {
				t.Errorf("upstream saw the close %v after the client hung up; want it at once", lag)
			}
			if x.Unsent == 0 {
				t.Errorf("upstream sent its whole stream (%d events) to a client that had left", x.Events)
			}
		})
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
