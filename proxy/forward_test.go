package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopguard/loopguard/sse"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's pool cleaners notice an idle pool or a stopped server
		// only at their next tick, and its Date-header updater runs for the
		// life of the process; none of them holds a connection.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// fasthttp compresses on a few workers of its own that live as long
		// as the process, so that the encoders' deep stacks stay off the
		// callers' goroutines.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp/stackless.funcWorker"),
	)
}

// startProxy serves a proxy for upstreamURL on a loopback port and returns its base URL.
func startProxy(t testing.TB, mutate func(*Config)) (*Server, string) {
	t.Helper()
	return startProxyWith(t, mutate)
}

// startProxyWith is startProxy with the server's options.
func startProxyWith(t testing.TB, mutate func(*Config), opts ...Option) (*Server, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Upstream.URL = "http://127.0.0.1:1" // replaced by mutate
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	srv, err := New(cfg, zerolog.Nop(), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return srv, serveProxy(t, srv)
}

// serveProxy serves srv on a port of its own until the test ends and
// returns its base URL.
func serveProxy(t testing.TB, srv *Server) string {
	t.Helper()
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
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// recorded is what the fake upstream saw.
type recorded struct {
	method, uri string
	header      http.Header
	body        string
}

func upstreamRecorder(t *testing.T, handler http.HandlerFunc) (*httptest.Server, <-chan recorded) {
	t.Helper()
	ch := make(chan recorded, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- recorded{r.Method, r.RequestURI, r.Header.Clone(), string(b)}
		handler(w, r)
	}))
	t.Cleanup(up.Close)
	return up, ch
}

// newClient is a client that keeps no idle connections, so no transport
// goroutine outlives a test.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

func TestForwardPassesRequestThrough(t *testing.T) {
	tests := []struct {
		name     string
		base     string // appended to the upstream's URL
		path     string
		wantPath string
	}{
		{"base without v1", "", "/v1/models?limit=2&x=%20y", "/v1/models?limit=2&x=%20y"},
		{"base with v1, client with v1", "/v1", "/v1/embeddings", "/v1/embeddings"},
		{"base with v1, client without", "/v1", "/embeddings", "/v1/embeddings"},
		{"Ollama's own API beside v1", "/v1", "/api/tags", "/api/tags"},
		{"base with prefix and v1", "/openai/v1/", "/v1/files/abc", "/openai/v1/files/abc"},
		{"dot-segments resolved, the rest kept verbatim", "", "/v1//weird/../path", "/v1//path"},
		{"ChatGPT Codex backend takes no v1", "/backend-api/codex", "/v1/responses", "/backend-api/codex/responses"},
		{"ChatGPT Codex backend, client without v1", "/backend-api/codex/", "/models?client_version=1", "/backend-api/codex/models?client_version=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Upstream", "yes")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTeapot)
				io.WriteString(w, `{"unknown_field":[1,2,3]}`)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL + tt.base })
			req, _ := http.NewRequest("POST", base+tt.path, strings.NewReader(`{"a": 1 }`))
			req.Header.Set("Authorization", "Bearer client-key")
			req.Header.Set("X-Custom", "kept")
			req.Header.Set("Connection", "keep-alive, X-Hop")
			req.Header.Set("X-Hop", "dropped")
			// A keep-alive client: without keep-alive Go sends its own
			// "Connection: close", which would drop the X-Hop token.
			tr := &http.Transport{DisableCompression: true}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()

			if resp.StatusCode != http.StatusTeapot || string(body) != `{"unknown_field":[1,2,3]}` || resp.Header.Get("X-Upstream") != "yes" {
				t.Errorf("response = %d %q %v; want 418, the upstream body and header", resp.StatusCode, body, resp.Header)
			}
			r := <-got
			if r.uri != tt.wantPath {
				t.Errorf("upstream path = %q; want %q", r.uri, tt.wantPath)
			}
			if r.body != `{"a": 1 }` || r.method != "POST" {
				t.Errorf("upstream got %s %q; want POST and the same bytes", r.method, r.body)
			}
			if r.header.Get("Authorization") != "Bearer client-key" || r.header.Get("X-Custom") != "kept" {
				t.Errorf("end-to-end headers lost: %v", r.header)
			}
			if r.header.Get("X-Hop") != "" || r.header.Get("User-Agent") != "Go-http-client/1.1" {
				t.Errorf("hop-by-hop header forwarded or User-Agent changed: %v", r.header)
			}
		})
	}
}

func TestForwardReplacesAuthorizationWithAPIKey(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Upstream.APIKey = "sk-server" })
	req, _ := http.NewRequest("GET", base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer client")
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := (<-got).header.Values("Authorization"); len(h) != 1 || h[0] != "Bearer sk-server" {
		t.Errorf("Authorization upstream = %q; want [Bearer sk-server]", h)
	}
}

func TestForwardErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out real upstream timeouts: skipped under -short")
	}
	// A listener that is closed at once gives a port nobody answers on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	defer slow.Close()

	tests := []struct {
		name       string
		upstream   string
		body       string
		mutate     func(*Config)
		wantStatus int
		wantCode   string
	}{
		{"unreachable", dead, "{}", nil, 502, "upstream_unreachable"},
		{"header timeout", slow.URL, "{}", func(c *Config) { c.Upstream.HeaderTimeout = 100 * time.Millisecond }, 504, "upstream_timeout"},
		{"body too large", slow.URL, strings.Repeat("x", 2048), func(c *Config) { c.Server.MaxBodyBytes = 1024 }, 413, "request_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, base := startProxy(t, func(c *Config) {
				c.Upstream.URL = tt.upstream
				if tt.mutate != nil {
					tt.mutate(c)
				}
			})
			resp, err := newClient().Post(base+"/v1/embeddings", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || gjson.GetBytes(b, "error.code").String() != tt.wantCode ||
				!gjson.GetBytes(b, "error.message").Exists() || !gjson.GetBytes(b, "error.type").Exists() {
				t.Errorf("got %d %s; want %d with error.code %q", resp.StatusCode, b, tt.wantStatus, tt.wantCode)
			}
		})
	}
}

// sseUpstream streams n events, one every gap, and reports on closed when the
// client went away before the end and how many events were left.
func sseUpstream(t *testing.T, n int, gap time.Duration, closed chan<- int) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for i := 0; i < n; i++ {
			if _, err := fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i); err != nil {
				closed <- n - i
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				closed <- n - i - 1
				return
			case <-time.After(gap):
			}
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	return up
}

func TestStreamIsForwardedEventByEvent(t *testing.T) {
	// The upstream sends its first event and the rest only once the client
	// has the first: a proxy that buffered would keep the first back, and
	// the client would wait for it in vain.
	firstRead := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"i\":0}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-firstRead:
		case <-r.Context().Done():
			return
		}
		for i := 1; i < 5; i++ {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	resp, err := newClient().Get(base + "/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Accel-Buffering") != "no" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("headers = %v; want X-Accel-Buffering: no and the upstream content type", resp.Header)
	}
	rd := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := rd.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "data: {\"i\":0}\n" {
			t.Fatalf("first line = %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first event did not arrive while the upstream held the rest back: the proxy is buffering")
	}
	close(firstRead)
	rest, _ := io.ReadAll(rd)
	want := "\ndata: {\"i\":1}\n\ndata: {\"i\":2}\n\ndata: {\"i\":3}\n\ndata: {\"i\":4}\n\ndata: [DONE]\n\n"
	if string(rest) != want {
		t.Errorf("rest = %q; want %q", rest, want)
	}
}

func TestClientDisconnectClosesUpstream(t *testing.T) {
	for _, gap := range []time.Duration{10 * time.Millisecond, 2 * time.Second} {
		t.Run(gap.String(), func(t *testing.T) {
			closed := make(chan int, 1)
			up := sseUpstream(t, 1000, gap, closed)
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
			rd := bufio.NewReader(conn)
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(line, "data:") {
					break
				}
			}
			conn.Close()
			start := time.Now()
			select {
			case left := <-closed:
				// At once, not at the upstream's next event (2 s away in
				// the slow case) nor its end (10 s away in the fast one);
				// the bound leaves room for a loaded machine under -race.
				if d := time.Since(start); d > time.Second {
					t.Errorf("upstream saw the close after %v; want it at once", d)
				}
				if left == 0 {
					t.Errorf("upstream had no events left; the test proves nothing")
				}
			case <-time.After(3 * time.Second):
				t.Fatal("upstream never saw the client's disconnect")
			}
		})
	}
}

func TestStreamUpstreamFailureEndsWithErrorEvent(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"i\":0}\n\n")
		w.(http.Flusher).Flush()
		// Reset the connection mid-body, as a crashed server's kernel does.
		// (A plain FIN without the last chunk reads as a clean end in
		// fasthttp's chunked reader, so it cannot be told from success.)
		c, _, _ := w.(http.Hijacker).Hijack()
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}))
	defer up.Close()
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	resp, err := newClient().Get(base + "/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("client read failed: %v (the stream must end cleanly)", err)
	}
	parts := strings.SplitN(string(b), "\n\n", 3)
	if len(parts) < 2 || parts[0] != `data: {"i":0}` || !strings.HasPrefix(parts[1], "data: {\"error\":") {
		t.Errorf("stream = %q; want the event, then a data: {\"error\":...} event", b)
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	closed := make(chan int, 1)
	up := sseUpstream(t, 3, 2*time.Second, closed)
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Upstream.IdleTimeout = 200 * time.Millisecond })
	start := time.Now()
	resp, err := newClient().Get(base + "/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"code":"upstream_timeout"`) {
		t.Errorf("stream = %q; want an upstream_timeout error event", b)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("idle stream ended after %v; want about 200ms", d)
	}
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Error("upstream connection was not closed after the idle timeout")
	}
}

func TestHealthAndReady(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := newClient().Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s = %d; want 200", p, resp.StatusCode)
		}
	}
	up.Close()
	resp, err := newClient().Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("GET /readyz with the upstream down = %d; want 503", resp.StatusCode)
	}
}

func TestShutdownLetsRunningStreamsFinish(t *testing.T) {
	closed := make(chan int, 1)
	up := sseUpstream(t, 4, 100*time.Millisecond, closed)
	cfg := DefaultConfig()
	cfg.Upstream.URL = up.URL
	srv, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	resp, err := newClient().Get("http://" + ln.Addr().String() + "/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var body []byte
	go func() {
		defer wg.Done()
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	wg.Wait()
	if !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("stream cut by shutdown: %q", body)
	}
}

func TestShutdownBeforeServeDoesNotHang(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Upstream.URL = "http://127.0.0.1:1"
	srv, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after Shutdown = %v; want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve after Shutdown did not return")
	}
}

func TestStreamRequestTimeout(t *testing.T) {
	closed := make(chan int, 1)
	up := sseUpstream(t, 100, 50*time.Millisecond, closed)
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Upstream.RequestTimeout = 300 * time.Millisecond })
	resp, err := newClient().Get(base + "/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.HasPrefix(string(b), `data: {"i":0}`) || !strings.Contains(string(b), `"code":"upstream_timeout"`) ||
		!strings.Contains(string(b), "request_timeout") {
		t.Errorf("stream = %q, %v; want events, then an upstream_timeout error naming request_timeout", b, err)
	}
	select {
	case left := <-closed:
		if left == 0 {
			t.Error("the upstream finished; the timeout did not close it")
		}
	case <-time.After(3 * time.Second):
		t.Error("the upstream never saw its connection closed")
	}
}

// TestRelayWritesPerRead checks that relay sends the events one read
// brought in one write and one flush, byte for byte as they came, and so
// the events of the reads that return at once after it (an upstream ahead
// of its client), and a paced stream's events one write each; with
// inspection off and on, and with an observer that cuts in the middle of a
// read's events.
func TestRelayWritesPerRead(t *testing.T) {
	o, events := observerAndEvents(t)
	var stream []byte
	var sizes, each []int
	for i := range 60 {
		stream = append(stream, events[64+i].Raw...)
		each = append(each, len(events[64+i].Raw))
		if i%3 == 2 {
			// Three events per read.
			sizes = append(sizes, len(events[64+i-2].Raw)+len(events[64+i-1].Raw)+len(events[64+i].Raw))
		}
	}
	tests := []struct {
		name       string
		obs        responseObserver
		sizes      []int // bytes per read; nil: one event per read
		ready      int   // reads that return at once after each that waits
		wantWrites int
	}{
		{"paced, inspection off", nil, nil, 0, 60},
		{"paced, inspection on", o, nil, 0, 60},
		{"3 events per read, inspection off", nil, sizes, 0, 20},
		{"3 events per read, inspection on", o, sizes, 0, 20},
		{"4 reads at once, inspection off", nil, each, 3, 15},
		{"4 reads at once, inspection on", o, each, 3, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &eventSource{events: events[64:], left: 60}
			var rd io.Reader = src
			if tt.sizes != nil {
				rd = &sizedReader{b: stream, sizes: tt.sizes}
			}
			if tt.ready > 0 {
				rd = &readyReader{sizedReader: rd.(*sizedReader), group: tt.ready + 1}
			}
			var sink writeCounter
			w := bufio.NewWriterSize(&sink, streamBodyBuf)
			rl := streamRelay{obs: tt.obs, rd: sse.NewReader(rd, 0)}
			var st relayStats
			if _, stop := rl.relay(w, rd, time.Now(), &st, false); stop != nil || st.readErr != nil {
				t.Fatalf("relay = %v, %v; want the stream relayed to its end", stop, st.readErr)
			}
			if !bytes.Equal(sink.b, stream) {
				t.Errorf("relayed %d bytes that differ from the upstream's %d", len(sink.b), len(stream))
			}
			if sink.writes != tt.wantWrites || st.events != 60 {
				t.Errorf("relay wrote %d times for %d events; want %d writes", sink.writes, st.events, tt.wantWrites)
			}
		})
	}
	t.Run("large event after a burst", func(t *testing.T) {
		large := "data: " + strings.Repeat("x", batchMax) + "\n\n" // too large to join the burst
		first := "data: " + strings.Repeat("y", 9000) + "\n\n"     // the reader's buffer grows to 16 KiB
		in := first + string(events[64].Raw) + string(events[65].Raw) + large
		var sink writeCounter
		w := bufio.NewWriterSize(&sink, streamBodyBuf)
		rd := &sizedReader{b: []byte(in)}
		rl := streamRelay{rd: sse.NewReader(rd, 0)}
		var st relayStats
		if _, stop := rl.relay(w, rd, time.Now(), &st, false); stop != nil || st.readErr != nil {
			t.Fatalf("relay = %v, %v; want the stream relayed to its end", stop, st.readErr)
		}
		// Once the reader's buffer grew for the first large event, it holds
		// the burst and the second: the burst goes out in one write, then
		// the large event in one.
		if string(sink.b) != in || sink.writes != 3 {
			t.Errorf("relayed %d bytes in %d writes; want the %d bytes in 3", len(sink.b), sink.writes, len(in))
		}
	})
	t.Run("cut within a read", func(t *testing.T) {
		cut := &cutAfter{n: 5}
		var sink writeCounter
		w := bufio.NewWriterSize(&sink, streamBodyBuf)
		rd := &sizedReader{b: stream, sizes: sizes}
		rl := streamRelay{obs: cut, rd: sse.NewReader(rd, 0)}
		var st relayStats
		if _, stop := rl.relay(w, rd, time.Now(), &st, false); stop != errCut {
			t.Fatalf("relay = %v; want errCut", stop)
		}
		// Events 4-6 came in one read; the 5th cut: 4 and 5 go out, together.
		want := 0
		for i := range 5 {
			want += len(events[64+i].Raw)
		}
		if !bytes.Equal(sink.b, stream[:want]) || sink.writes != 2 {
			t.Errorf("relayed %d bytes in %d writes; want the first %d bytes of the stream in 2", len(sink.b), sink.writes, want)
		}
	})
}

// sizedReader returns b in reads of the given sizes, then io.EOF.
type sizedReader struct {
	b     []byte
	sizes []int
}

func (r *sizedReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := len(r.b)
	if len(r.sizes) > 0 {
		n, r.sizes = r.sizes[0], r.sizes[1:]
	}
	n = copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// readyReader is a sizedReader whose reads come in groups: the first of a
// group waits, the others return at once (Ready).
type readyReader struct {
	*sizedReader
	group, reads int
}

func (r *readyReader) Read(p []byte) (int, error) {
	r.reads++
	return r.sizedReader.Read(p)
}

func (r *readyReader) Ready() bool { return len(r.b) > 0 && r.reads%r.group != 0 }

// writeCounter keeps what is written and counts the writes.
type writeCounter struct {
	b      []byte
	writes int
}

func (c *writeCounter) Write(p []byte) (int, error) {
	c.b = append(c.b, p...)
	c.writes++
	return len(p), nil
}

// cutAfter is an observer that passes events through and stops the stream
// at the nth.
type cutAfter struct {
	responseObserver
	n, seen int
}

func (c *cutAfter) event(ev *sse.Event, out []byte) ([]byte, bool) {
	c.seen++
	return append(out, ev.Raw...), c.seen == c.n
}

// eventSource is an upstream that delivers left events, one per Read, as
// a paced stream arrives, then io.EOF. The events follow on from where the
// last stream stopped, so that streams relayed in turn do not repeat one
// another (which a detector would take for a degenerate answer).
type eventSource struct {
	events []sse.Event
	next   int
	left   int
}

func (s *eventSource) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	ev := s.events[s.next%len(s.events)]
	s.next++
	s.left--
	return copy(p, ev.Raw), nil
}

// TestStreamOversizeEventPassesRest: an event longer than
// stream.max_event_bytes, in a stream relayed within the upstream socket's
// pump (chunked, over TCP, one event a read), ends parsing: the rest is
// copied as it comes, with reads that wait, and the client gets every byte
// the upstream sent, in order.
func TestStreamOversizeEventPassesRest(t *testing.T) {
	events := []string{`data: {"i":0}` + "\n\n", `data: {"i":1}` + "\n\n",
		`data: {"i":2,"text":"` + strings.Repeat("x", 6000) + `"}` + "\n\n", `data: {"i":3}` + "\n\n", "data: [DONE]\n\n"}
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		if _, ok := u.readRequest(br); !ok {
			return
		}
		_, _ = io.WriteString(c, rawStreamHead)
		for _, ev := range events {
			if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		_, _ = io.WriteString(c, "0\r\n\r\n")
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url(); c.Stream.MaxEventBytes = 4096 })
	resp, err := newClient().Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if want := strings.Join(events, ""); err != nil || string(got) != want {
		t.Errorf("client got %d bytes, %v; want the upstream's %d bytes as they were", len(got), err, len(want))
	}
}
