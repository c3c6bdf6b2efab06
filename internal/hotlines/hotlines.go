// Package hotlines lists the cache lines a piece of work will read first,
// scattered over many objects, so that they can all be loaded at once just
// before it.
//
// A proxy with thousands of open streams finds each stream's state out of
// the processor's caches at its next event. Reached the way code reaches
// it, each line is a miss that waits for the pointer the line before
// brought: relaying one event went through a dozen objects in a row
// (docs/streams.md). Loaded from a list, the
// addresses are known up front and the processor has the misses in flight
// together. Loading changes nothing; an address that went stale (an object
// its owner no longer uses) is still memory the list keeps alive, and only
// costs a load.
package hotlines

import "unsafe"

// List is a list of cache lines. Its zero value is empty.
type List struct {
	at [Max]unsafe.Pointer
	n  int
}

const (
	// Max is the most lines a List holds.
	Max = 48
	// ObjectLines is the most lines Add lists of one object: its head,
	// where a type's hot fields belong.
	ObjectLines = 4
	// LineSize is the size of a cache line on the machines loopguard runs on.
	LineSize = 64
)

// Add lists the lines of the size bytes at p, up to ObjectLines of them and
// while the list has room. A nil p adds nothing.
func (l *List) Add(p unsafe.Pointer, size uintptr) {
	if p == nil {
		return
	}
	for off := uintptr(0); off < min(size, ObjectLines*LineSize) && l.n < Max; off += LineSize {
		l.at[l.n] = unsafe.Add(p, off)
		l.n++
	}
}

// Len is the number of lines listed.
func (l *List) Len() int { return l.n }

// Lines returns the lines listed.
func (l *List) Lines() []unsafe.Pointer { return l.at[:l.n] }

// Load reads a byte of every line listed and returns their sum, for the
// caller to keep: a use, so that the compiler keeps the loads.
func (l *List) Load() byte {
	var sum byte
	for _, p := range l.at[:l.n] {
		sum += *(*byte)(p)
	}
	return sum
}
