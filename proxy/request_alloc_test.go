//go:build !race

package proxy

import (
	"testing"

	"github.com/loopguard/loopguard/policy"
	"github.com/valyala/fasthttp"
)

// TestRequestReadingAllocs holds what every request of a guarded API reads
// of itself before its pipeline runs to no allocation.
func TestRequestReadingAllocs(t *testing.T) {
	cfg := policy.DefaultConfig()
	var ctx fasthttp.RequestCtx
	for _, h := range [][2]string{{"Content-Type", "application/json"}, {"User-Agent", "agent/1"},
		{"Accept", "application/json"}, {"session_id", "run-7"}, {"X-Loopguard-Mode", "off"}} {
		ctx.Request.Header.Add(h[0], h[1])
	}
	body := chatBody(27<<10, false)
	for _, tt := range []struct {
		name string
		f    func()
	}{
		{"session and mode headers", func() { clientHeaders(&ctx, &cfg) }},
	} {
		if n := testing.AllocsPerRun(100, tt.f); n != 0 {
			t.Errorf("%s: %.1f allocations; want 0", tt.name, n)
		}
	}
	_ = body
}
