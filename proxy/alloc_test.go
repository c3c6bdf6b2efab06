//go:build !race

package proxy

import "testing"

// TestObserveEventAllocs holds inline inspection of a healthy stream to zero
// allocations per event in the steady state.
func TestObserveEventAllocs(t *testing.T) {
	o, events := observerAndEvents(t)
	out := make([]byte, 0, 4096)
	i := 64
	if n := testing.AllocsPerRun(1000, func() {
		out, _ = o.event(&events[i%len(events)], out[:0])
		i++
	}); n != 0 {
		t.Errorf("inspecting one stream event allocates %.1f times; want 0", n)
	}
}
