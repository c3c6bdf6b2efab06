package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/loopguard/loopguard/proxy"
	"github.com/rs/zerolog"
)

// TestServedClientLeaves: a client that leaves while the upstream prepares
// its answer closes the upstream connection, so the model stops. The proxy
// finds the client's socket through syscall.Conn; the connection tracker
// must not hide it (it did, and such clients went unnoticed).
func TestServedClientLeaves(t *testing.T) {
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upLn.Close()
	asked, closed := make(chan struct{}), make(chan time.Time, 1)
	go func() {
		c, err := upLn.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4<<10)
		if _, err := c.Read(buf); err != nil {
			return
		}
		close(asked)
		// Never answer: read until the proxy closes the connection.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, err := c.Read(buf); err != nil {
				closed <- time.Now()
				return
			}
		}
	}()

	srv, ln := newProxy(t, "http://"+upLn.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(&connTracker{Listener: ln, open: map[net.Conn]struct{}{}}) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	select {
	case <-asked:
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the upstream")
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
}

// newProxy returns a proxy in front of upstream (a base URL), with default
// settings, and a loopback listener for it to serve.
func newProxy(t *testing.T, upstream string) (*proxy.Server, net.Listener) {
	t.Helper()
	cfg := proxy.DefaultConfig()
	cfg.Upstream.URL = upstream
	srv, err := proxy.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, ln
}
