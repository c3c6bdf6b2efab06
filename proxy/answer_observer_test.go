package proxy

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/loopguard/loopguard/sse"
)

// observeStream runs stream through o event by event, as the relay does,
// and returns what the client got and whether o stopped the stream; a
// stream o did not stop is ended with o.end.
func observeStream(t *testing.T, o *answerObserver, stream string) (string, bool) {
	t.Helper()
	rd := sse.NewReader(strings.NewReader(stream), 0)
	var out []byte
	for {
		ev, err := rd.Next()
		if err != nil {
			return string(o.end(out)), false
		}
		var stop bool
		if out, stop = o.event(&ev, out); stop {
			return string(out), true
		}
	}
}

// streamAPIsByWire returns the test streams of streamAPIs keyed by their
// wireAPI.
func streamAPIsByWire(t *testing.T) map[*wireAPI]streamAPI {
	byName := map[string]*wireAPI{"chat": chatAPI, "responses": responsesAPI, "anthropic": anthropicAPI}
	out := map[*wireAPI]streamAPI{}
	for _, a := range streamAPIs(t) {
		out[byName[a.name]] = a
	}
	return out
}

// TestObserverHotLines: what an event of a text answer reads of its
// observer (the parts' switches, the answer, the cut watch's counts and
// detectors) lies in its first two cache lines, besides the one arrival
// it writes. With thousands of open streams every event finds its
// observer out of the cache: the flags and the watch lay over six lines,
// and the plan's, before (docs/streams.md). An observer is in the 2 KiB size
// class, whose objects start on a line or, with the allocator's 8-byte
// header, 8 bytes after one.
func TestObserverHotLines(t *testing.T) {
	var o answerObserver
	w := unsafe.Offsetof(o.watch)
	hot := map[string][2]uintptr{
		"answer":          {unsafe.Offsetof(o.answer), unsafe.Sizeof(o.answer)},
		"endPending":      {unsafe.Offsetof(o.endPending), 1},
		"encoded":         {unsafe.Offsetof(o.encoded), 1},
		"mayCut":          {unsafe.Offsetof(o.mayCut), 1},
		"holding":         {unsafe.Offsetof(o.holding), 1},
		"trimming":        {unsafe.Offsetof(o.trimming), 1},
		"recording":       {unsafe.Offsetof(o.recording), 1},
		"watch.cut":       {w + unsafe.Offsetof(o.watch.cut), 8},
		"watch.bytes":     {w + unsafe.Offsetof(o.watch.bytes), 8},
		"watch.text":      {w + unsafe.Offsetof(o.watch.text), 8},
		"watch.reasoning": {w + unsafe.Offsetof(o.watch.reasoning), 8},
		"watch.since":     {w + unsafe.Offsetof(o.watch.since), 8},
		"watch.nArrivals": {w + unsafe.Offsetof(o.watch.nArrivals), 8},
		"watch.content":   {w + unsafe.Offsetof(o.watch.content), unsafe.Sizeof(o.watch.content)},
	}
	for name, f := range hot {
		if f[0]+f[1] > observerHotBytes {
			t.Errorf("answerObserver.%s at bytes %d-%d: not in the first %d", name, f[0], f[0]+f[1]-1, observerHotBytes)
		}
	}
	for range 100 {
		if at := uintptr(unsafe.Pointer(observerPool.Get().(*answerObserver))); at%64 > 8 {
			t.Fatalf("an observer at %#x: %d bytes after a cache line", at, at%64)
		}
	}
}
