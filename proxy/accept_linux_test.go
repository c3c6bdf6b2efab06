package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/internal/rawsock"
)

// TestServeRawClients: a client's connection is read and written with raw
// system calls (rawsock) by every Server, whoever serves it (the binary,
// loopguard run, replay, the demo), is kept while open, and is closed by
// CloseConnections, which a shutdown whose grace is over calls.
func TestServeRawClients(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer up.Close()
	srv, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != `{"object":"list","data":[]}` {
		t.Fatalf("got %d %q through the proxy", resp.StatusCode, body)
	}

	srv.clients.mu.Lock()
	var kinds []string
	for conn := range srv.clients.open {
		if _, ok := conn.Conn.(*rawsock.Conn); !ok {
			kinds = append(kinds, "not raw")
		} else {
			kinds = append(kinds, "raw")
		}
	}
	srv.clients.mu.Unlock()
	if len(kinds) != 1 || kinds[0] != "raw" {
		t.Fatalf("open client connections: %v; want one, raw", kinds)
	}

	if n := srv.CloseConnections(); n != 1 {
		t.Errorf("CloseConnections = %d; want 1 (the kept-alive client)", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("client read after CloseConnections: %v; want EOF", err)
	}
	srv.clients.mu.Lock()
	left := len(srv.clients.open)
	srv.clients.mu.Unlock()
	if left != 0 {
		t.Errorf("%d connections kept after they were closed; want 0", left)
	}
}
