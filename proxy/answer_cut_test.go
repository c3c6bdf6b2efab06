package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/sse"
)

func TestCutWatch(t *testing.T) {
	cfg := DefaultConfig().Detect.Stream
	prose := strings.Fields(`The proxy reads each event as it passes and forwards its bytes before it looks at them,
		so a healthy answer reaches the agent as fast as the model writes it.`)
	tests := []struct {
		name      string
		choice    int
		reasoning bool
		repeat    bool
		wantCut   bool
		wantSlot  int
	}{
		{"healthy content", 0, false, false, false, 0},
		{"repeated content of choice 0", 0, false, true, true, 1},
		{"repeated reasoning of choice 0", 0, true, true, true, 2},
		{"repeated content of choice 1", 1, false, true, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := cutWatch{cfg: &cfg}
			var fed int64
			for i := 0; i < 60 && w.cut == nil; i++ {
				s := prose[i%len(prose)] + " "
				if tt.repeat {
					s = repeatedSentence
				}
				u := sse.Update{Choice: tt.choice, Text: []byte(s)}
				if tt.reasoning {
					u = sse.Update{Choice: tt.choice, Reasoning: []byte(s)}
				}
				fed += int64(len(s))
				w.add(&u)
			}
			if got := w.cut != nil; got != tt.wantCut {
				t.Fatalf("cut = %v; want %v", got, tt.wantCut)
			}
			if w.slot != tt.wantSlot {
				t.Errorf("slot = %d; want %d", w.slot, tt.wantSlot)
			}
			if w.bytes != fed {
				t.Errorf("bytes = %d; want %d", w.bytes, fed)
			}
			if tt.wantCut && (w.offset <= 0 || w.offset >= fed) {
				t.Errorf("offset = %d; want inside the %d bytes fed", w.offset, fed)
			}
			if d := w.delay(); d < 0 || d > time.Minute || tt.wantSlot == 0 && d != 0 {
				t.Errorf("delay = %v; want a short one, 0 for a cut outside choice 0's text", d)
			}

			detector := w.content[tt.choice]
			w.reset()
			w.cfg = &cfg
			if w.cut != nil || w.bytes != 0 || w.text != 0 || w.reasoning != 0 || w.nArrivals != 0 || w.slot != 0 || w.offset != 0 {
				t.Errorf("after reset: %+v; want a watch with nothing seen", w)
			}
			if detector != nil && w.content[tt.choice] != detector {
				t.Error("reset dropped the detector; want it kept for the next answer")
			}
			// A reset detector has forgotten the copies it saw: two more
			// are no degeneration.
			for range 2 {
				if w.add(&sse.Update{Choice: tt.choice, Text: []byte(repeatedSentence)}) {
					t.Fatal("the watch cut two copies after reset; want the earlier copies forgotten")
				}
			}
		})
	}
}

// TestCutWatchArrivals: a cut's delay is timed from the arrival that
// brought the first degenerate byte, as remembered in 12-byte arrivals; an
// answer older than their clock's range starts them over.
func TestCutWatchArrivals(t *testing.T) {
	cfg := DefaultConfig().Detect.Stream
	w := cutWatch{cfg: &cfg}
	for range 3 {
		w.add(&sse.Update{Text: []byte("healthy ")})
	}
	// The arrivals so far came a second ago, the degeneration after them.
	w.since -= int64(time.Second)
	w.add(&sse.Update{Text: []byte("loop ")})
	w.cutAt(inspect.Detection{Category: inspect.TokenDegeneration, Score: 1}, 3*int64(len("healthy ")))
	w.slot = 1
	if d := w.delay(); d < 0 || d > 500*time.Millisecond {
		t.Errorf("delay = %v; want the time since the fourth event (under 500ms), not since the first", d)
	}
	w.offset = 0
	if d := w.delay(); d < time.Second || d > time.Minute {
		t.Errorf("delay from the first byte = %v; want a second and a little", d)
	}

	// 72 minutes into the answer an arrival's clock would overflow: the
	// arrivals start over at the newest.
	w.since -= int64(72 * time.Minute)
	w.add(&sse.Update{Text: []byte("more ")})
	if w.nArrivals != 1 || w.arrivals[0].at != 0 || w.arrivals[0].content != uint32(w.text) {
		t.Errorf("after 72 minutes: %d arrivals, first %+v; want one at 0 with the text so far (%d)", w.nArrivals, w.arrivals[0], w.text)
	}
}
