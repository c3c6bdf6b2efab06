package proxy

import "unsafe"

// hotLines are the cache lines a stream's next event reads first, listed
// once from the many objects an open stream is made of (its relay, reader,
// body, connections and observer), so that they can all be loaded at once
// when the upstream's socket becomes readable.
//
// With thousands of open streams all of that has left the processor's
// caches between two events. Reached the way the code reaches it, each
// line is a miss that waits for the pointer the line before brought: the
// relay's chain from the upstream's body to the client's socket was a
// dozen misses in a row, each about 0.15 µs on the machine of issue 18.
// Loaded from a list, the addresses are known up front and the processor
// has the misses in flight together. Loading changes nothing; an address
// that went stale (an object the stream no longer uses) is still memory
// the list keeps alive, and only costs a load.
type hotLines struct {
	at  [hotLinesMax]unsafe.Pointer
	n   int
	sum byte // what load read: a use, so that the compiler keeps the loads
}

// hotLinesMax bounds the list; an object adds at most hotObjectLines.
const (
	hotLinesMax    = 48
	hotObjectLines = 4
	cacheLine      = 64
)

// add lists the lines of the size bytes at p, up to hotObjectLines.
func (h *hotLines) add(p unsafe.Pointer, size uintptr) {
	if p == nil {
		return
	}
	for off := uintptr(0); off < min(size, hotObjectLines*cacheLine) && h.n < hotLinesMax; off += cacheLine {
		h.at[h.n] = unsafe.Add(p, off)
		h.n++
	}
}

// load reads a byte of every line listed.
func (h *hotLines) load() {
	var sum byte
	for _, p := range h.at[:h.n] {
		sum += *(*byte)(p)
	}
	h.sum = sum
}
