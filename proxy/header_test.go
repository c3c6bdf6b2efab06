package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestUpstreamDatePassesThrough: the upstream's Date is end-to-end; loopguard
// writes no Date of its own, so dropping it would leave the client none.
func TestUpstreamDatePassesThrough(t *testing.T) {
	const date = "Mon, 02 Jan 2006 15:04:05 GMT"
	// Longer than the pooled reader addDate starts with, then short again.
	long := "Monday, 02-Jan-06 15:04:05 GMT; " + strings.Repeat("an upstream's own words, ", 8) + "and no more"
	tests := []struct {
		name, path, contentType, body, date string
	}{
		{"pass-through", "/v1/models", "application/json", `{"data":[]}`, date},
		{"pass-through, a long Date", "/v1/models", "application/json", `{"data":[]}`, long},
		{"chat, not streamed", "/v1/chat/completions", "application/json", `{"choices":[]}`, date},
		{"chat, streamed", "/v1/chat/completions", "text/event-stream", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", date},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", tt.date)
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
			if got := resp.Header.Values("Date"); len(got) != 1 || got[0] != tt.date {
				t.Errorf("Date = %q; want [%q]", got, tt.date)
			}
			if string(body) != tt.body {
				t.Errorf("body = %q; want %q", body, tt.body)
			}
		})
	}
}

// TestHTTP10StreamIsCloseDelimited: HTTP/1.0 has no chunked coding, so an
// HTTP/1.0 client gets the stream's bytes as they are, ended by the close of
// the connection.
func TestHTTP10StreamIsCloseDelimited(t *testing.T) {
	const stream = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
	// A non-streamed answer of unknown length (chunked from the upstream)
	// streams through too; so does one past what is inspected.
	small := `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`
	large := `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("a", inspectLimit+1) + `"}}]}`
	tests := []struct {
		name, path, contentType, answer string
	}{
		{"chat, inspected", "/v1/chat/completions", "text/event-stream", stream},
		{"pass-through", "/v1/completions", "text/event-stream", stream},
		{"pass-through, not a stream, no length", "/v1/embeddings", "application/json", small},
		{"chat, not a stream, past the inspection limit", "/v1/chat/completions", "application/json", large},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				io.WriteString(w, tt.answer[:len(tt.answer)/2])
				w.(http.Flusher).Flush() // chunked: no Content-Length
				io.WriteString(w, tt.answer[len(tt.answer)/2:])
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			fmt.Fprintf(conn, "POST %s HTTP/1.0\r\nHost: loopguard\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tt.path, len(body), body)
			// ReadAll ends at the close; a kept-open connection fails it
			// with the deadline.
			raw, err := io.ReadAll(conn)
			if err != nil {
				t.Fatalf("reading the answer: %v (got %q)", err, raw)
			}
			head, got, ok := strings.Cut(string(raw), "\r\n\r\n")
			if !ok || !strings.HasPrefix(head, "HTTP/1.1 200 ") {
				t.Fatalf("answer = %q; want a 200 and a header", raw)
			}
			lower := strings.ToLower(head)
			if strings.Contains(lower, "transfer-encoding") || strings.Contains(lower, "content-length") || !strings.Contains(lower, "\r\nconnection: close") {
				t.Errorf("header = %q; want no length or coding, Connection: close", head)
			}
			if got != tt.answer {
				t.Errorf("body of %d bytes; want the upstream's %d", len(got), len(tt.answer))
			}
		})
	}
}

// TestShutdownWaitsForHTTP10Streams: fasthttp does not wait for the
// connections it handed over, so Shutdown must, as it does for HTTP/1.1
// streams.
func TestShutdownWaitsForHTTP10Streams(t *testing.T) {
	const events, gap = 8, 100 * time.Millisecond
	up := sseUpstream(t, events, gap, make(chan int, 1))
	cfg := DefaultConfig()
	cfg.Upstream.URL = up.URL
	srv, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /v1/stream HTTP/1.0\r\nHost: loopguard\r\n\r\n")
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('}'); err != nil { // the first event is under way
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	// The stream had about (events-1)*gap to go; a Shutdown that did not
	// wait returns in a few milliseconds.
	if took := time.Since(start); took < 2*gap {
		t.Errorf("Shutdown returned after %v, before the stream ended", took)
	}
	rest, err := io.ReadAll(r)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("stream after Shutdown = %q, %v; want it whole, to [DONE]", rest, err)
	}
}
