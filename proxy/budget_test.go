package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestBodyMemoryBudget: while request bodies in flight hold
// server.max_body_memory, another request is answered 503 with
// Retry-After and an OpenAI-shaped error, unread; once they are done, it
// is served. The budget is given back however a request ends.
func TestBodyMemoryBudget(t *testing.T) {
	up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
	srv, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = up.URL
		c.Server.MaxBodyBytes = 4 << 20
		c.Server.MaxBodyMemory = 1 << 20
	})
	addr := strings.TrimPrefix(base, "http://")
	send := func(size int) (*http.Response, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			fmt.Fprintf(c, "POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("a", size))
		}()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	// A body on its way holds 900 KiB of the budget.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\naaaa", 900<<10)
	deadline := time.Now().Add(10 * time.Second)
	for srv.bodies.used.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first body's share was never reserved")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, body := send(500 << 10)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		gjson.Get(body, "error.code").String() != "body_memory_exhausted" || !gjson.Get(body, "error.message").Exists() ||
		!gjson.Get(body, "error.type").Exists() {
		t.Fatalf("a body beyond the budget: %d (Retry-After %q) %s; want 503 with Retry-After and an OpenAI error",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Small bodies fit beside it.
	if resp, body := send(64 << 10); resp.StatusCode != http.StatusOK {
		t.Fatalf("a body within the budget: %d %s; want 200", resp.StatusCode, body)
	}
	// The client of the first leaves mid-body: its share comes back.
	slow.Close()
	for srv.bodies.used.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still reserved after every request ended", srv.bodies.used.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if resp, body := send(500 << 10); resp.StatusCode != http.StatusOK {
		t.Fatalf("the same body once the budget is free: %d %s; want 200", resp.StatusCode, body)
	}
	if n := srv.bodies.used.Load(); n != 0 {
		t.Errorf("%d bytes reserved after every request ended; want 0", n)
	}
}
