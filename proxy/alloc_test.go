//go:build !race

package proxy

import (
	"bufio"
	"io"
	"testing"
	"time"

	"github.com/loopguard/loopguard/sse"
)

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

// TestRelayEventAllocs holds the relay of a stream (read, scan for the
// event's end, write, flush; inspection on and off) to zero allocations per
// event: a run relays a whole stream of 64 events, one per read, and the
// reader, the observer and the writer are reused across runs as they are
// reused across the events of one stream.
func TestRelayEventAllocs(t *testing.T) {
	o, events := observerAndEvents(t)
	for _, tt := range []struct {
		name string
		obs  responseObserver
	}{
		{"inspection off", nil},
		{"inspection on", o},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const perStream = 64
			src := &eventSource{events: events[64:]}
			rl := streamRelay{obs: tt.obs, rd: sse.NewReader(src, 0)}
			w := bufio.NewWriterSize(io.Discard, streamBodyBuf)
			var st relayStats
			relayed := 0
			if n := testing.AllocsPerRun(200, func() {
				src.left = perStream
				rl.rd.Reset(src)
				st = relayStats{}
				if stop := rl.relay(w, src, time.Now(), &st); stop != nil || st.readErr != nil {
					t.Fatalf("relay = %v, %v; want the stream relayed to its end", stop, st.readErr)
				}
				relayed += st.events
			}); n != 0 {
				t.Errorf("relaying a stream of %d events allocates %.1f times; want 0", perStream, n)
			}
			if relayed != 201*perStream {
				t.Errorf("relayed %d events; want %d", relayed, 201*perStream)
			}
		})
	}
}
