package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// floodUpstream streams large SSE events as fast as its client takes them,
// until its client's connection ends. Each request is numbered by its
// X-Test-Stream header; gone(n) is closed once the upstream saw request
// n's connection end, and written(n) counts the bytes it sent.
type floodUpstream struct {
	url     string
	mu      sync.Mutex
	streams map[string]*floodStream
}

type floodStream struct {
	written atomic.Int64
	gone    chan struct{}
}

func startFloodUpstream(t *testing.T) *floodUpstream {
	t.Helper()
	fu := &floodUpstream{streams: map[string]*floodStream{}}
	event := []byte("data: " + strings.Repeat("x", 16<<10) + "\n\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fs := fu.stream(r.Header.Get("X-Test-Stream"))
		go func() {
			<-r.Context().Done()
			close(fs.gone)
		}()
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			n, err := w.Write(event)
			fs.written.Add(int64(n))
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	fu.url = up.URL
	return fu
}

func (fu *floodUpstream) stream(name string) *floodStream {
	fu.mu.Lock()
	defer fu.mu.Unlock()
	fs := fu.streams[name]
	if fs == nil {
		fs = &floodStream{gone: make(chan struct{})}
		fu.streams[name] = fs
	}
	return fs
}

// openRawStream sends a streamed request for stream name over a raw socket
// with a small receive buffer, and returns the socket unread.
func openRawStream(t *testing.T, base, name string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.(*net.TCPConn)
	_ = tc.SetReadBuffer(4 << 10)
	t.Cleanup(func() { tc.Close() })
	fmt.Fprintf(tc, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Test-Stream: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", name)
	return tc
}

// waitStalled waits until the upstream of stream fs has stopped getting
// its bytes taken: the proxy's write to a client that does not read is
// blocked.
func waitStalled(t *testing.T, fs *floodStream) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last, since := int64(-1), time.Now()
	for time.Now().Before(deadline) {
		n := fs.written.Load()
		if n != last {
			last, since = n, time.Now()
		} else if n > 0 && time.Since(since) > 500*time.Millisecond {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the upstream still sends after 30s (%d bytes): the client's stream never stalled", last)
}

func wantGone(t *testing.T, fs *floodStream, within time.Duration, what string) {
	t.Helper()
	select {
	case <-fs.gone:
	case <-time.After(within):
		t.Fatalf("%s: the upstream connection is still open after %v", what, within)
	}
}

// TestStalledClientWedgesNoOne: a streaming client that stops reading
// blocks the relay's write to it. When it then half-closes, its stream
// still ends upstream, other clients' hang-ups still reach their upstreams,
// and a shutdown still ends; one that never closes loses its stream after
// server.send_timeout.
func TestStalledClientWedgesNoOne(t *testing.T) {
	t.Run("half-closes after stalling", func(t *testing.T) {
		fu := startFloodUpstream(t)
		srv, base := startProxy(t, func(c *Config) {
			c.Upstream.URL = fu.url
			c.Server.SendTimeout = 10 * time.Minute // the write stays stuck for the test's life
		})
		stalled := openRawStream(t, base, "stalled")
		waitStalled(t, fu.stream("stalled"))
		if err := stalled.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		wantGone(t, fu.stream("stalled"), 10*time.Second, "stalled client half-closed")

		// Another client reads a little and hangs up: the watcher that
		// saw the stalled client's FIN must still be serving.
		other := openRawStream(t, base, "other")
		br := bufio.NewReader(other)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatalf("other stream: %v", err)
		}
		other.Close()
		wantGone(t, fu.stream("other"), 10*time.Second, "second client hung up")

		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := srv.Shutdown(ctx)
			srv.CloseConnections()
			done <- err
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Shutdown with a 1s grace still running after 10s")
		}
	})
	t.Run("never closes", func(t *testing.T) {
		fu := startFloodUpstream(t)
		srv, base := startProxy(t, func(c *Config) {
			c.Upstream.URL = fu.url
			c.Server.SendTimeout = 300 * time.Millisecond
		})
		c := openRawStream(t, base, "stalled")
		// Neither read nor FIN: only the send timeout can end it.
		wantGone(t, fu.stream("stalled"), 30*time.Second, "client stopped reading")
		// And the proxy let go of the client's connection.
		deadline := time.Now().Add(10 * time.Second)
		for openClients(srv) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d client connections still open 10s after the stream ended", openClients(srv))
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = c
	})
}

// openClients counts the client connections srv holds open.
func openClients(srv *Server) int {
	srv.clients.mu.Lock()
	defer srv.clients.mu.Unlock()
	return len(srv.clients.open)
}
