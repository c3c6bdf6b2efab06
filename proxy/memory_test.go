package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// TestDecisionsDoNotKeepRequestBodies: what a session keeps after a request
// (its loop pattern in the session store, its timeline in the recorder)
// must be copies, not substrings of the request: a three-byte tool name
// would keep a whole 1 MB history alive for the session's lifetime.
func TestDecisionsDoNotKeepRequestBodies(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswer)
	}))
	defer up.Close()
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })

	const sessions, pad = 16, 1 << 20
	send := func(i int) {
		// A looping history behind a 1 MB system prompt, different per
		// session so that no two requests share a body.
		padding := strings.Repeat(fmt.Sprintf("rule %d. ", i), pad/8)
		body := strings.Replace(loopingHistory(3, false), "You are an agent.", padding, 1)
		resp, _ := postChat(t, base, fmt.Sprintf("mem-%d", i), body)
		if got := resp.Header.Get(HeaderAction); got != "warn" {
			t.Fatalf("request %d: %s = %q; want warn (a decision the session keeps)", i, HeaderAction, got)
		}
	}
	heap := func() uint64 {
		// Two cycles: the first may only clear sync.Pools' primary caches.
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	send(0) // buffers and pools reach their working size
	before := heap()
	for i := 1; i <= sessions; i++ {
		send(i)
	}
	after := heap()
	// Kept bodies would add sessions MB; copies of names and briefs, a few
	// KB. A quarter of the bodies leaves room for pool and GC noise.
	if after > before && after-before > sessions*pad/4 {
		t.Errorf("heap grew by %.1f MB over %d sessions of 1 MB requests; want well under %d MB (bodies kept)",
			float64(after-before)/(1<<20), sessions, sessions/4)
	}
	t.Logf("heap after %d sessions of 1 MB requests: %+d KB", sessions, (int64(after)-int64(before))>>10)
}
