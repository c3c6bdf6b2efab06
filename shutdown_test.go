//go:build unix

package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/proxy"
	"github.com/rs/zerolog"
)

// SIGTERM lets a running stream finish within [server] shutdown_grace, and
// cuts it when the grace runs out: loopguard never waits longer.
func TestSIGTERMGrace(t *testing.T) {
	tests := []struct {
		name     string
		grace    time.Duration
		wantDone bool // the stream ends with [DONE]
	}{
		{name: "stream finishes within the grace", grace: 5 * time.Second, wantDone: true},
		{name: "grace shorter than the stream", grace: 200 * time.Millisecond, wantDone: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A streamed answer of ten deltas 100ms apart: about a second.
			up := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{
				{Content: "0123456789", ChunkSize: 1, Delay: 100 * time.Millisecond}}})
			srv, ln := newProxy(t, up.URL())
			code := make(chan int, 1)
			go func() { code <- serveUntilSignal(srv, ln, tt.grace, zerolog.Nop()) }()
			resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"count"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := make([]byte, 8)
			if _, err := io.ReadFull(resp.Body, first); err != nil {
				t.Fatal(err)
			}
			// The stream is open, so serveUntilSignal is serving and has
			// registered for the signal: this process does not die of it.
			sent := time.Now()
			if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(resp.Body)
			select {
			case c := <-code:
				if c != 0 {
					t.Errorf("serveUntilSignal = %d; want 0", c)
				}
			case <-time.After(tt.grace + 5*time.Second):
				t.Fatalf("serveUntilSignal still running %v after SIGTERM with a %v grace", time.Since(sent), tt.grace)
			}
			took := time.Since(sent)
			if done := strings.HasSuffix(string(rest), "data: [DONE]\n\n"); done != tt.wantDone {
				t.Errorf("stream ended with [DONE]: %v; want %v (after %v)", done, tt.wantDone, took)
			}
			if !tt.wantDone && took > tt.grace+time.Second {
				t.Errorf("shutdown took %v; want about the %v grace", took, tt.grace)
			}
			// New connections are refused once shutdown began.
			if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
				t.Error("the listener still accepts connections after shutdown")
			}
		})
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
