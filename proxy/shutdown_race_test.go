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
)

// TestLiveFeedShutdownRace: the admin live feed's handler runs on a
// goroutine of fasthttp's adaptor that outlives its connection, and keeps
// looking at its request's cancellation. A shutdown after its client left
// must neither race it (run with -race: fasthttp's ShutdownWithContext
// writes the field the RequestCtx's Done reads) nor leave it running.
func TestLiveFeedShutdownRace(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the live feed's polls around a shutdown: skipped under -short")
	}
	up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswer)
	})
	srv, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	feed, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_ = feed.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(feed, "GET /loopguard/api/events HTTP/1.1\r\nHost: x\r\n\r\n")
	rd := bufio.NewReader(feed)
	if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("live feed: %q, %v", line, err)
	}
	// The client leaves; entries that the feed then writes fail, which ends
	// the connection while the handler goes on.
	feed.Close()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; openClients(srv) > 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the live feed's connection is still open 10s after its client left")
		}
		resp, _ := post(t, base+"/v1/chat/completions", fmt.Sprintf("feed-%d", i),
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		resp.Body.Close()
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond) // the handler looks at its context at every poll (250ms)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	time.Sleep(600 * time.Millisecond) // and again after the shutdown
}
