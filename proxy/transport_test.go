package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// rawUpstream is an upstream written at the TCP level, to misbehave the way
// real servers do. serve runs once per accepted connection, with the
// connection's index (0 for the first one accepted).
type rawUpstream struct {
	ln    net.Listener
	conns atomic.Int32
	reqs  atomic.Int32
	wg    sync.WaitGroup
}

func startRawUpstream(t *testing.T, serve func(u *rawUpstream, c net.Conn, br *bufio.Reader, idx int)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	var open sync.Map
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			idx := int(u.conns.Add(1)) - 1
			open.Store(c, true)
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				defer open.Delete(c)
				serve(u, c, bufio.NewReader(c), idx)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) url() string { return "http://" + u.ln.Addr().String() }

// readRequest reads one request (and its body) or reports that the
// connection ended.
func (u *rawUpstream) readRequest(br *bufio.Reader) (*http.Request, bool) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	_, _ = io.Copy(io.Discard, req.Body)
	u.reqs.Add(1)
	return req, true
}

const rawJSON = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

const rawSSE = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
	"e\r\ndata: {\"a\":1}\n\n\r\n" + "e\r\ndata: [DONE]\n\n\r\n" + "0\r\n\r\n"

func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// An upstream that closes every connection after its answer without saying
// Connection: close (llama-server after each stream, Python's http.server):
// the next request must not fail on the dead pooled connection.
func TestStaleConnectionAfterEachAnswer(t *testing.T) {
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		req, ok := u.readRequest(br)
		if !ok {
			return
		}
		if strings.Contains(req.URL.Path, "stream") {
			_, _ = io.WriteString(c, rawSSE)
		} else {
			_, _ = io.WriteString(c, rawJSON)
		}
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
	failed := 0
	for i := range 40 {
		path := "/v1/plain"
		if i%2 == 0 {
			path = "/v1/stream"
		}
		if status, _ := postJSON(t, base+path, `{}`); status != http.StatusOK {
			failed++
		}
		time.Sleep(2 * time.Millisecond) // let the upstream's FIN arrive
	}
	if failed != 0 {
		t.Errorf("%d of 40 requests failed; want 0", failed)
	}
}

// A pooled connection that the upstream closes just as the next request is
// sent (the peek at checkout cannot see it): the upstream read the request
// and hung up without a byte. Sent again on a fresh connection only where a
// repeat is harmless (a safe method, an idempotency key); a POST that may
// have started a generation, an upload or a batch is answered 502 instead.
func TestReadRequestRetriedOnlyWhenReplayable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the crossed-close window on each case: skipped under -short")
	}
	tests := []struct {
		name, method string
		hdr          map[string]string
		retried      bool
	}{
		{name: "GET", method: http.MethodGet, retried: true},
		{name: "HEAD", method: http.MethodHead, retried: true},
		{name: "POST with Idempotency-Key", method: http.MethodPost, hdr: map[string]string{"Idempotency-Key": "k1"}, retried: true},
		{name: "POST", method: http.MethodPost},
		{name: "PUT", method: http.MethodPut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
				req, ok := u.readRequest(br)
				if !ok {
					return
				}
				if req.Method == http.MethodHead {
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
				} else {
					_, _ = io.WriteString(c, rawJSON)
				}
				// Keep the connection open and idle, then read the next
				// request, begin work on it and drop it.
				if _, ok := u.readRequest(br); ok {
					time.Sleep(3 * crossedWindow)
				}
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
			client := newClient()
			do := func() int {
				req, _ := http.NewRequest(tt.method, base+"/v1/files/x", strings.NewReader(`{}`))
				for k, v := range tt.hdr {
					req.Header.Set(k, v)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if status := do(); status != http.StatusOK {
				t.Fatalf("first request: status %d; want 200", status)
			}
			status := do()
			wantStatus, wantReqs := http.StatusBadGateway, int32(2)
			if tt.retried {
				wantStatus, wantReqs = http.StatusOK, 3
			}
			if status != wantStatus || up.reqs.Load() != wantReqs {
				t.Errorf("%s on a connection the upstream dropped after reading it: status %d, upstream read %d requests; want %d, %d",
					tt.method, status, up.reqs.Load(), wantStatus, wantReqs)
			}
		})
	}
}

// A request that fails on a fresh connection, or after response bytes
// arrived, reached the upstream and may have started a generation: it is
// never sent again.
func TestNoRetryOnFreshConnectionOrAfterResponseBytes(t *testing.T) {
	tests := []struct {
		name  string
		serve func(u *rawUpstream, c net.Conn, br *bufio.Reader, idx int)
	}{
		{"fresh connection closed", func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
			u.readRequest(br)
		}},
		{"reused connection closed mid-headers", func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
			if _, ok := u.readRequest(br); !ok {
				return
			}
			_, _ = io.WriteString(c, rawJSON)
			if _, ok := u.readRequest(br); ok {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: appl")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startRawUpstream(t, tt.serve)
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
			status, _ := postJSON(t, base+"/v1/a", `{}`)
			if tt.name == "fresh connection closed" {
				if status != http.StatusBadGateway {
					t.Errorf("status %d; want 502", status)
				}
				if got := up.reqs.Load(); got != 1 {
					t.Errorf("upstream saw %d requests; want 1", got)
				}
				return
			}
			if status != http.StatusOK {
				t.Fatalf("first request: status %d", status)
			}
			if status, _ := postJSON(t, base+"/v1/a", `{}`); status != http.StatusBadGateway {
				t.Errorf("second request: status %d; want 502", status)
			}
			if got := up.reqs.Load(); got != 2 {
				t.Errorf("upstream saw %d requests; want 2 (no retry after response bytes)", got)
			}
		})
	}
}

// An upstream with a short idle timeout (uvicorn, load balancers): a
// request sent after it closed the idle connection goes out on a new one.
func TestUpstreamIdleTimeout(t *testing.T) {
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		for {
			_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, ok := u.readRequest(br); !ok {
				return
			}
			_, _ = io.WriteString(c, rawJSON)
		}
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
	for i := range 3 {
		if status, body := postJSON(t, base+"/v1/a", `{}`); status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, status, body)
		}
		time.Sleep(450 * time.Millisecond)
	}
	if got := up.reqs.Load(); got != 3 {
		t.Errorf("upstream saw %d requests; want 3 (each once)", got)
	}
}

// A client that leaves while the upstream has not answered yet (prompt
// processing, a non-streamed generation) closes the upstream connection.
func TestClientLeavesBeforeHeaders(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			closed := make(chan time.Time, 1)
			up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
				if _, ok := u.readRequest(br); !ok {
					return
				}
				_, _ = br.ReadByte() // blocks until the proxy closes
				closed <- time.Now()
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
			c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			for up.reqs.Load() == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			left := time.Now()
			c.Close()
			select {
			case at := <-closed:
				if d := at.Sub(left); d > time.Second {
					t.Errorf("upstream connection closed %v after the client left; want < 1s", d)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("upstream connection still open 5s after the client left")
			}
		})
	}
}

// A request with both Content-Length and Transfer-Encoding is refused and
// the connection closed: the bytes after the chunked body never reach the
// upstream as a second request (RFC 9112 section 6.3).
func TestRequestSmugglingRefused(t *testing.T) {
	var paths sync.Map
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		for {
			req, ok := u.readRequest(br)
			if !ok {
				return
			}
			paths.Store(req.URL.Path, true)
			_, _ = io.WriteString(c, rawJSON)
		}
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /v1/a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"0\r\n\r\nGET /smuggled-a HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, _ := io.ReadAll(c) // ends when the proxy closes the connection
	if !strings.HasPrefix(string(all), "HTTP/1.1 400") {
		t.Errorf("answer %q; want a 400", all)
	}
	if strings.Count(string(all), "HTTP/1.1 ") != 1 {
		t.Errorf("answer %q; want exactly one response", all)
	}
	if _, ok := paths.Load("/smuggled-a"); ok {
		t.Error("the smuggled request reached the upstream")
	}
	if _, ok := paths.Load("/v1/a"); ok {
		t.Error("the ambiguous request reached the upstream")
	}
}

// Response headers larger than the pooled read buffer pass through; a
// malformed header is a 502 whose message does not echo the upstream's bytes.
func TestUpstreamResponseHeaders(t *testing.T) {
	big := strings.Repeat("v", 20<<10)
	tests := []struct {
		name       string
		answer     string
		wantStatus int
		check      func(t *testing.T, h http.Header, body string)
	}{
		{"20 KiB header", "HTTP/1.1 200 OK\r\nX-Big: " + big + "\r\nContent-Length: 2\r\n\r\nok", 200,
			func(t *testing.T, h http.Header, body string) {
				if h.Get("X-Big") != big || body != "ok" {
					t.Errorf("X-Big of %d bytes, body %q; want %d bytes, \"ok\"", len(h.Get("X-Big")), body, len(big))
				}
			}},
		{"malformed", "HTTP/1.1 200 OK\r\nsecret-token-in-header\r\n\r\n", 502,
			func(t *testing.T, _ http.Header, body string) {
				if strings.Contains(body, "secret") || strings.Contains(body, "HTTP/1.1") {
					t.Errorf("error echoes the upstream's bytes: %s", body)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
				if _, ok := u.readRequest(br); ok {
					_, _ = io.WriteString(c, tt.answer)
				}
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
			resp, err := http.Get(base + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d (%s); want %d", resp.StatusCode, b, tt.wantStatus)
			}
			tt.check(t, resp.Header, string(b))
		})
	}
}

// A non-streamed answer larger than what loopguard inspects (inspectLimit)
// streams through uninspected and unchanged, with and without a declared
// length, instead of being held whole in memory: the client gets its first
// bytes while the upstream still holds back the last ones.
func TestLargeInspectedAnswerPassesThrough(t *testing.T) {
	answer := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("0123456789abcdef", (inspectLimit+1<<20)/16) + `"},"finish_reason":"stop"}]}`
	for _, sized := range []bool{true, false} {
		t.Run(fmt.Sprintf("sized=%v", sized), func(t *testing.T) {
			released := make(chan struct{})
			var heldTooLong atomic.Bool
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if sized {
					w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
				}
				_, _ = io.WriteString(w, answer[:len(answer)-100])
				w.(http.Flusher).Flush()
				select {
				case <-released:
				case <-time.After(5 * time.Second):
					heldTooLong.Store(true)
				}
				_, _ = io.WriteString(w, answer[len(answer)-100:])
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			resp, err := newClient().Post(base+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			head := make([]byte, 1024)
			_, err = io.ReadFull(resp.Body, head)
			close(released)
			rest, _ := io.ReadAll(resp.Body)
			if err != nil || string(head)+string(rest) != answer {
				t.Errorf("status %d, %d bytes (%v); want the upstream's %d bytes unchanged", resp.StatusCode, len(head)+len(rest), err, len(answer))
			}
			if heldTooLong.Load() {
				t.Error("loopguard held the answer until the upstream finished it")
			}
		})
	}
}

// A request that times out waiting for the headers on a reused connection
// reached a live upstream that is slow (a long prompt): it is not sent again.
func TestHeaderTimeoutOnReusedConnectionNotRetried(t *testing.T) {
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		if _, ok := u.readRequest(br); !ok {
			return
		}
		_, _ = io.WriteString(c, rawJSON)
		if _, ok := u.readRequest(br); ok {
			_, _ = br.ReadByte() // never answers the second request
		}
	})
	_, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = up.url()
		c.Upstream.HeaderTimeout = 300 * time.Millisecond
	})
	if status, _ := postJSON(t, base+"/v1/a", `{}`); status != http.StatusOK {
		t.Fatalf("first request: status %d", status)
	}
	if status, _ := postJSON(t, base+"/v1/a", `{}`); status != http.StatusGatewayTimeout {
		t.Errorf("second request: status %d; want 504", status)
	}
	if got := up.reqs.Load(); got != 2 {
		t.Errorf("upstream saw %d requests; want 2 (a timed-out request is not sent again)", got)
	}
}

// bodyFrom sends one request to a raw upstream and returns its body.
func bodyFrom(t *testing.T, u *rawUpstream, idle time.Duration) *upstreamBody {
	t.Helper()
	up, err := newUpstream(UpstreamConfig{URL: u.url(), ConnectTimeout: time.Second, HeaderTimeout: 5 * time.Second,
		IdleTimeout: idle, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(u.url() + "/v1/stream")
	req.Header.SetHost("x")
	body, err := up.roundTrip(&exchange{}, req, resp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { body.Close(nil) })
	return body
}

// rawStreamHead is a chunked stream's response header.
const rawStreamHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// Chunks the upstream sent together come in one read, so that the relay
// writes the events they hold together; a chunk not all there yet is never
// waited for: the read returns what is buffered.
func TestUpstreamBodyReadsBufferedChunksTogether(t *testing.T) {
	const burst = "f\r\ndata: {\"a\":1}\n\n\r\n" + "f\r\ndata: {\"a\":2}\n\n\r\n" + "f\r\ndata: {\"a\":3}\n\n\r\n"
	const events = "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"a\":3}\n\n"
	for _, tt := range []struct {
		name       string
		tail, rest string // sent with the burst; after the first read
		first      string // what the first read returns
		body       string
	}{
		{"whole chunks", "", "", events, events},
		{"next chunk in part", "5\r\nab", "cde\r\n", events + "ab", events + "abcde"},
		{"next chunk without its CRLF", "5\r\nabcde", "\r\n", events, events + "abcde"},
		{"size line in part", "5", "\r\nabcde\r\n", events, events + "abcde"},
		{"size line alone", "5\r\n", "abcde\r\n", events, events + "abcde"},
		{"last chunk", "0\r\n", "", events, events},
	} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
				if _, ok := u.readRequest(br); !ok {
					return
				}
				_, _ = io.WriteString(c, rawStreamHead+burst+tt.tail)
				<-release
				if !strings.HasPrefix(tt.tail, "0") {
					_, _ = io.WriteString(c, tt.rest+"0\r\n")
				}
				_, _ = io.WriteString(c, "\r\n")
			})
			body := bodyFrom(t, up, time.Minute)
			time.Sleep(50 * time.Millisecond) // the burst is in, and the tail
			p := make([]byte, 4096)
			n, err := body.Read(p)
			close(release)
			if err != nil || string(p[:n]) != tt.first {
				t.Fatalf("first read = %q, %v; want %q, nil", p[:n], err, tt.first)
			}
			rest, err := io.ReadAll(body)
			if got := string(p[:n]) + string(rest); err != nil || got != tt.body {
				t.Errorf("body = %q, %v; want %q, nil", got, err, tt.body)
			}
		})
	}
}

// The body's idle timeout counts the time a read waits, as when the
// deadline was renewed before every read, though it is armed once an idle
// period: events closer than the timeout keep the stream open however long
// it runs, a relay that was busy longer than the timeout (a slow client)
// still gets what arrived meanwhile, and silence ends the stream.
func TestUpstreamBodyIdleTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out real idle timeouts: skipped under -short")
	}
	const idle = 300 * time.Millisecond
	const chunk = "6\r\nevent\n\r\n"
	for _, tt := range []struct {
		name  string
		gaps  []int         // the upstream's pause before each chunk, in ms
		busy  time.Duration // the reader's pause after each read
		reads int           // chunks read before errIdle; -1: all, then the end
	}{
		{"events closer than the timeout", []int{0, 200, 200, 200, 200, 200}, 0, -1},
		{"reader busy past the timeout", []int{0, 50, 50}, 2 * idle, -1},
		{"silence", []int{0, 200, 1000}, 0, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
				if _, ok := u.readRequest(br); !ok {
					return
				}
				_, _ = io.WriteString(c, rawStreamHead)
				for _, gap := range tt.gaps {
					time.Sleep(time.Duration(gap) * time.Millisecond)
					if _, err := io.WriteString(c, chunk); err != nil {
						return
					}
				}
				_, _ = io.WriteString(c, "0\r\n\r\n")
			})
			for _, pumped := range []bool{false, true} {
				body := bodyFrom(t, up, idle)
				p := make([]byte, 6)
				reads := 0
				var err error
				read := func() bool { // true: the body ended, err says how
					for {
						if _, err = body.Read(p); err != nil {
							return err != sse.ErrWouldBlock
						}
						reads++
						time.Sleep(tt.busy)
					}
				}
				if !pumped {
					read()
				} else if ok, perr := body.pump(read); !ok {
					t.Fatal("a chunked body on a TCP connection was not pumped")
				} else if perr != nil {
					err = perr
				}
				if (err != io.EOF || tt.reads >= 0) && (err != errIdle || reads != tt.reads) {
					t.Fatalf("pumped %v: read %d: %v; want %d reads, then errIdle (-1: all, then io.EOF)", pumped, reads, err, tt.reads)
				}
			}
		})
	}
}

// Ready tells the relay a read returns at once: while the upstream's burst
// is buffered, mid-chunk or between chunks, and no longer once the rest of
// a chunk is still to come.
func TestUpstreamBodyReady(t *testing.T) {
	const burst = "f\r\ndata: {\"a\":1}\n\n\r\n" + "f\r\ndata: {\"a\":2}\n\n\r\n" + "5\r\nab"
	release := make(chan struct{})
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		if _, ok := u.readRequest(br); !ok {
			return
		}
		_, _ = io.WriteString(c, rawStreamHead+burst)
		<-release
		_, _ = io.WriteString(c, "cde\r\n0\r\n\r\n")
	})
	defer close(release)
	body := bodyFrom(t, up, time.Minute)
	time.Sleep(50 * time.Millisecond) // the burst is in
	var got []string
	for _, size := range []int{10, 5, 15, 15} {
		p := make([]byte, size)
		n, err := body.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%q %v", p[:n], body.Ready()))
	}
	q := func(s string, ready bool) string { return fmt.Sprintf("%q %v", s, ready) }
	want := []string{q(`data: {"a"`, true), q(":1}\n\n", true), q("data: {\"a\":2}\n\n", true), q("ab", false)}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("reads and Ready after each:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestChunkSize(t *testing.T) {
	for _, tt := range []struct {
		line string
		size int
		ok   bool
	}{
		{"f\r\n", 15, true},
		{"1A2\r\n", 0x1a2, true},
		{"10;name=value\r\n", 16, true},
		{"10 \t\r\n", 16, true},
		{"0\r\n", 0, true},
		{"\r\n", 0, false},
		{"10\n", 0, false},
		{"10 x\r\n", 0, false},
		{"g\r\n", 0, false},
		{"1000000\r\n", 1 << 24, true},
		{"7fffffff\r\n", 1<<31 - 1, true},
		{"80000000\r\n", 0, false},         // 2 GiB
		{"000000000000001\r\n", 1, true},   // 15 digits
		{"0000000000000001\r\n", 0, false}, // 16
	} {
		size, ok := chunkSize([]byte(tt.line))
		if size != tt.size || ok != tt.ok {
			t.Errorf("chunkSize(%q) = %d, %v; want %d, %v", tt.line, size, ok, tt.size, tt.ok)
		}
	}
}

// chunkedBody decodes what fasthttp accepts and fails on broken framing
// with errChunk or io.ErrUnexpectedEOF, never a panic or a hang.
func TestChunkedBody(t *testing.T) {
	for _, tt := range []struct {
		name, in, body string
		err            error
	}{
		{"chunks", "3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n", "abcde", io.EOF},
		{"trailer", "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", "abc", io.EOF},
		{"trailer ended by a bare LF", "3\r\nabc\r\n0\r\nX-T: 1\n\n", "abc", io.EOF},
		{"no CRLF after data", "3\r\nabcX\r\n0\r\n\r\n", "abc", errChunk},
		{"bad size", "x\r\nabc\r\n", "", errChunk},
		{"size line too long", "3;" + strings.Repeat("x", 200) + "\r\nabc\r\n", "", errChunk},
		{"cut in data", "5\r\nab", "ab", io.ErrUnexpectedEOF},
		{"cut in size line", "3\r\nabc\r\n1", "abc", io.ErrUnexpectedEOF},
		{"cut before the trailer", "3\r\nabc\r\n0\r\n", "abc", io.ErrUnexpectedEOF},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &chunkedBody{br: bufio.NewReaderSize(strings.NewReader(tt.in), 64)}
			var got []byte
			p := make([]byte, 4)
			var err error
			for err == nil {
				var n int
				n, err = c.Read(p)
				got = append(got, p[:n]...)
			}
			if string(got) != tt.body || err != tt.err {
				t.Errorf("read %q, %v; want %q, %v", got, err, tt.body, tt.err)
			}
		})
	}
}

// TestWriteRequestAsFasthttp: the request line, headers and body that
// writeRequest sends in one writev are byte for byte what fasthttp's
// Request.Write sends, for each shape of request forward builds.
func TestWriteRequestAsFasthttp(t *testing.T) {
	big := strings.Repeat(`{"role":"tool","content":"line of output\n"},`, 800)
	tests := []struct {
		name, method, body string
		setBody            bool
	}{
		{"post, a body larger than the write buffer", "POST", big, true},
		{"post, small body", "POST", `{"model":"m"}`, true},
		{"post, empty body", "POST", "", true},
		{"post, no body set", "POST", "", false},
		{"get", "GET", "", false},
		{"get with a body", "GET", "q=1", true},
		{"head", "HEAD", "", false},
		{"delete", "DELETE", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			build := func() *fasthttp.Request {
				req := new(fasthttp.Request)
				req.Header.DisableNormalizing()
				req.Header.SetNoDefaultContentType(true)
				req.Header.SetMethod(tt.method)
				req.SetRequestURI("/v1/chat/completions?x=1")
				req.Header.SetHost("upstream:8080")
				req.Header.Add("x-session-id", "s-1")
				req.Header.Add("Accept-Encoding", "identity")
				if tt.setBody {
					req.SetBodyRaw([]byte(tt.body))
				}
				return req
			}
			var want strings.Builder
			bw := bufio.NewWriter(&want)
			if err := build().Write(bw); err != nil {
				t.Fatal(err)
			}
			bw.Flush()

			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan string, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					got <- err.Error()
					return
				}
				b, _ := io.ReadAll(c)
				c.Close()
				got <- string(b)
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			x := acquireExchange()
			err = x.writeRequest(c, build())
			releaseExchange(x)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			if g := <-got; g != want.String() {
				t.Errorf("sent %d bytes:\n%.300q\nwant %d bytes as Request.Write:\n%.300q", len(g), g, want.Len(), want.String())
			}
		})
	}
}

// TestReadThenResetRepeatsOnlyInference: an upstream that reads a request
// on a reused connection and resets it at once (a crossed close, as far as
// loopguard can tell) gets it again only if it is an inference call on a
// guarded API, whose repeat costs tokens; a POST to /v1/files (an upload,
// a batch, a fine-tuning job) is never seen twice, and gets 502.
func TestReadThenResetRepeatsOnlyInference(t *testing.T) {
	for _, tt := range []struct {
		path    string
		body    string
		repeats bool
	}{
		{"/v1/files", `{"purpose":"batch"}`, false},
		{"/v1/batches", `{"input_file_id":"f"}`, false},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, true},
	} {
		t.Run(tt.path, func(t *testing.T) {
			var seen sync.Map // path -> count
			up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
				count := func(r *http.Request) {
					n, _ := seen.LoadOrStore(r.URL.Path, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
				}
				for first := true; ; first = false {
					req, ok := u.readRequest(br)
					if !ok {
						return
					}
					if req.URL.Path == tt.path {
						count(req)
						if !first {
							// Read, then a reset at once.
							_ = c.(*net.TCPConn).SetLinger(0)
							_ = c.Close()
							return
						}
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
						strconv.Itoa(len(chatAnswer))+"\r\n\r\n"+chatAnswer)
				}
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			post := func() int {
				resp, err := client.Post(base+tt.path, "application/json", strings.NewReader(tt.body))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if status := post(); status != http.StatusOK {
				t.Fatalf("first POST: %d; want 200", status)
			}
			status := post()
			n, _ := seen.Load(tt.path)
			got := n.(*atomic.Int32).Load()
			want, wantStatus := int32(2), http.StatusBadGateway
			if tt.repeats {
				want, wantStatus = 3, http.StatusOK
			}
			if got != want || status != wantStatus {
				t.Errorf("POST %s read then reset: the upstream saw %d, the client got %d; want %d and %d",
					tt.path, got, status, want, wantStatus)
			}
		})
	}
}
