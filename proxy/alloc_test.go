//go:build !race

package proxy

import (
	"bufio"
	"io"
	"testing"
)

// TestObserveEventAllocs holds inline inspection of a healthy stream to zero
// allocations per event in the steady state.
func TestObserveEventAllocs(t *testing.T) {
	o, events := observerAndEvents(t)
	w := bufio.NewWriter(io.Discard)
	i := 64
	if n := testing.AllocsPerRun(1000, func() {
		o.event(&events[i%len(events)], w)
		i++
	}); n != 0 {
		t.Errorf("inspecting one stream event allocates %.1f times; want 0", n)
	}
}
