package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// rawPost sends a POST of size bytes to addr on a connection of its own,
// and returns the answer, read once the whole body is sent or sending it
// failed, as a client that uploads first does. The body must be sent
// whole, whatever the answer: a refused body's connection reads what
// follows before it closes, so that its client reads the answer rather
// than a reset (linger).
func rawPost(t *testing.T, addr, path string, size int) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	sent := make(chan error, 1)
	go func() {
		_, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", path, size)
		chunk := []byte(strings.Repeat("a", 16<<10))
		for n := 0; n < size && err == nil; n += len(chunk) {
			_, err = c.Write(chunk[:min(len(chunk), size-n)])
		}
		sent <- err
	}()
	if err := <-sent; err != nil {
		t.Fatalf("POST %s of %d bytes: sending the body: %v; want it read, if only to be discarded", path, size, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("POST %s of %d bytes: %v; want an answer", path, size, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("POST %s of %d bytes: reading the answer: %v", path, size, err)
	}
	return resp, string(b)
}

// okUpstream answers every request 200 with a small JSON body, after
// reading its body.
func okUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	return up
}

// waitUsed waits until the budget in use satisfies ok.
func waitUsed(t *testing.T, srv *Server, what string, ok func(int64) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(srv.bodies.used.Load()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d bytes of the budget in use", what, srv.bodies.used.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBodyMemoryBudget: the budget holds the bytes bodies have sent, not
// the sizes they declare. A client that declares most of the budget and
// sends four bytes leaves the rest to others; one that has sent most of it
// makes another request that does not fit beside it get 503 with
// Retry-After and an OpenAI-shaped error, which its client reads (no
// reset) although its body was cut short. The budget is given back however
// a request ends.
func TestBodyMemoryBudget(t *testing.T) {
	up := okUpstream(t)
	srv, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = up.URL
		c.Server.MaxBodyBytes = 4 << 20
		c.Server.MaxBodyMemory = 1 << 20
		c.Server.BodyTimeout = 0 // the stalled bodies below wait for the test
	})
	addr := strings.TrimPrefix(base, "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Declared, not sent: nothing to hold.
	declared := dial()
	fmt.Fprintf(declared, "POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\naaaa", 900<<10)
	time.Sleep(50 * time.Millisecond)
	if resp, body := rawPost(t, addr, "/v1/files", 700<<10); resp.StatusCode != http.StatusOK {
		t.Fatalf("a body beside one declared and unsent: %d %s; want 200", resp.StatusCode, body)
	}
	// Sent: 900 KiB held.
	sent := dial()
	fmt.Fprintf(sent, "POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 1000<<10, strings.Repeat("a", 900<<10))
	waitUsed(t, srv, "900 KiB sent", func(n int64) bool { return n >= 850<<10 }) // less what came with the header
	resp, body := rawPost(t, addr, "/v1/files", 500<<10)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		gjson.Get(body, "error.code").String() != "body_memory_exhausted" || !gjson.Get(body, "error.message").Exists() ||
		!gjson.Get(body, "error.type").Exists() {
		t.Fatalf("a body beyond the budget: %d (Retry-After %q) %s; want 503 with Retry-After and an OpenAI error",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Small bodies fit beside it.
	if resp, body := rawPost(t, addr, "/v1/files", 64<<10); resp.StatusCode != http.StatusOK {
		t.Fatalf("a body within the budget: %d %s; want 200", resp.StatusCode, body)
	}
	// The client of the stalled body leaves mid-body: its share comes back.
	sent.Close()
	declared.Close()
	waitUsed(t, srv, "after every request ended", func(n int64) bool { return n == 0 })
	if resp, body := rawPost(t, addr, "/v1/files", 500<<10); resp.StatusCode != http.StatusOK {
		t.Fatalf("the same body once the budget is free: %d %s; want 200", resp.StatusCode, body)
	}
	waitUsed(t, srv, "after every request ended", func(n int64) bool { return n == 0 })
}

// TestRefusedBodyAnswerIsRead: a body over server.max_body_bytes is
// refused unread, and its client, still sending, reads the 413 rather
// than a reset.
func TestRefusedBodyAnswerIsRead(t *testing.T) {
	up := okUpstream(t)
	_, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = up.URL
		c.Server.MaxBodyBytes = 256 << 10
	})
	for i := 0; i < 5; i++ {
		resp, body := rawPost(t, strings.TrimPrefix(base, "http://"), "/v1/files", 2<<20)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || gjson.Get(body, "error.code").String() != "request_too_large" {
			t.Fatalf("a body over the limit: %d %s; want 413 request_too_large", resp.StatusCode, body)
		}
	}
}
