// Package readbuf is the read step the stream readers share (sse's Reader
// and ArrayReader, ndjson's Reader): one buffer holding the unconsumed bytes
// buf[r:w], slid to the front or grown up to a maximum before each read, so
// that what each reader returns is a slice of it, never a copy.
package readbuf

import (
	"errors"
	"io"
)

// ErrTooLarge reports unconsumed bytes that already fill the maximum; sse
// exports it as ErrEventTooLarge.
var ErrTooLarge = errors.New("sse: event too large")

// ErrWouldBlock is what a non-blocking io.Reader returns when it has no
// bytes yet; sse exports it.
var ErrWouldBlock = errors.New("sse: read would block")

// InitialSize is the buffer a reader starts with; it doubles up to the
// maximum. A proxy holds one reader per open stream for the stream's whole
// life, and the events and lines of a model's answer are 120-500 bytes (one
// token's chunk), so the start is small: thousands of open streams each
// keep 1 KiB, not 4 (docs/streams.md); one that needs more grows the buffer
// once.
const InitialSize = 1 << 10

// maxEmptyReads bounds consecutive (0, nil) reads, as bufio does, so a
// misbehaving io.Reader cannot spin a reader forever.
const maxEmptyReads = 100

// Fill reads more bytes from src after buf[:w], sliding the unconsumed
// buf[r:w] to the front first, or growing buf (up to max), when the tail is
// too short for a useful read; moved, when not nil, is told the distance
// before the bytes move. It returns the buffer and its r and w after, whether
// src had nothing yet (ErrWouldBlock), and the error that ends the stream:
// src's own, ErrTooLarge, io.ErrNoProgress after many empty reads, or
// badCount when src returned an impossible count.
func Fill(src io.Reader, buf []byte, r, w, max int, moved func(d int), badCount error) (_ []byte, _, _ int, wouldBlock bool, err error) {
	if buf == nil {
		buf = make([]byte, min(InitialSize, max))
	}
	// Slide first when the unconsumed bytes are all that is left (free) or
	// when the tail is too short for a useful read.
	if r > 0 && (r == w || len(buf)-w < len(buf)/4) {
		if moved != nil {
			moved(r)
		}
		w = copy(buf, buf[r:w])
		r = 0
	}
	if w == len(buf) {
		if w-r >= max {
			return buf, r, w, false, ErrTooLarge
		}
		nb := make([]byte, min(2*len(buf), max))
		if moved != nil {
			moved(r)
		}
		w = copy(nb, buf[r:w])
		r = 0
		buf = nb
	}
	for range maxEmptyReads {
		n, err := src.Read(buf[w:])
		if n < 0 || n > len(buf)-w {
			return buf, r, w, false, badCount
		}
		w += n
		if err == ErrWouldBlock {
			return buf, r, w, n == 0, nil
		}
		if err != nil || n > 0 {
			return buf, r, w, false, err
		}
	}
	return buf, r, w, false, io.ErrNoProgress
}
