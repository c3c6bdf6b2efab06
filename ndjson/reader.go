// Package ndjson reads newline-delimited JSON streams, Ollama's streamed
// answers (one JSON object a line, the last with "done": true), as sse
// reads event streams: line by line as they pass, each line's bytes
// exactly as received, so that a proxy relays the stream byte for byte and
// inspects each line on the way. Its Reader has sse.Reader's methods and
// returns its lines as sse.Events, so that a relay written for one serves
// both.
package ndjson

import (
	"bytes"
	"io"

	"github.com/loopguard/loopguard/internal/readbuf"
	"github.com/loopguard/loopguard/sse"
)

// Reader splits a byte stream into lines ended by LF. Lines may be split
// across reads at any byte. It buffers at most max bytes of one line, and
// never copies a line it returns. A Reader is not safe for concurrent use.
type Reader struct {
	rd       io.Reader
	rdy      sse.Readier
	max      int
	buf      []byte
	r, w     int // buf[r:w] is read but not yet returned
	searched int // no LF in buf[r:r+searched]: a long line is scanned once
	err      error
	eof      bool
}

// NewReader returns a Reader of rd whose buffer grows as needed up to max
// bytes per line (sse.DefaultMaxEventSize if max <= 0).
func NewReader(rd io.Reader, max int) *Reader {
	r := &Reader{max: max}
	if r.max <= 0 {
		r.max = sse.DefaultMaxEventSize
	}
	r.Reset(rd)
	return r
}

// Reset makes r read a new stream from rd, keeping a small buffer.
func (r *Reader) Reset(rd io.Reader) {
	buf := r.buf
	if cap(buf) > 64<<10 {
		buf = nil
	}
	rdy, _ := rd.(sse.Readier)
	*r = Reader{rd: rd, rdy: rdy, max: r.max, buf: buf}
}

// Next returns the next line as an event: Raw is the line with its LF,
// Data the line without its line ending when it is not blank (nil for a
// blank line). Bytes after the last LF come back as a Partial event at the
// end of the stream, and the call after it returns io.EOF. Errors are
// those of sse.Reader.Next: the underlying reader's, sse.ErrEventTooLarge
// (the line so far stays in Buffered) and sse.ErrWouldBlock (not sticky).
func (r *Reader) Next() (sse.Event, error) {
	for {
		if ev, ok := r.scan(); ok {
			return ev, nil
		}
		if r.err != nil {
			if r.eof && r.r < r.w {
				return r.line(r.w, true), nil
			}
			return sse.Event{}, r.err
		}
		if r.fill() {
			return sse.Event{}, sse.ErrWouldBlock
		}
	}
}

// NextBuffered returns the next line when all of it is already buffered,
// without reading.
func (r *Reader) NextBuffered() (sse.Event, bool) {
	if r.err != nil {
		return sse.Event{}, false
	}
	return r.scan()
}

// Ready reports whether ReadReady would read.
func (r *Reader) Ready() bool { return r.rdy != nil && r.err == nil && r.rdy.Ready() }

// ReadReady returns the next line as NextBuffered does, reading first when
// it must and the underlying reader holds bytes; it never waits.
func (r *Reader) ReadReady() (sse.Event, bool) {
	if ev, ok := r.NextBuffered(); ok {
		return ev, true
	}
	if !r.Ready() {
		return sse.Event{}, false
	}
	r.fill()
	return r.scan()
}

// Buffered returns the bytes read but not yet returned in a line.
func (r *Reader) Buffered() []byte { return r.buf[r.r:r.w] }

func (r *Reader) scan() (sse.Event, bool) {
	i := bytes.IndexByte(r.buf[r.r+r.searched:r.w], '\n')
	if i < 0 {
		r.searched = r.w - r.r
		return sse.Event{}, false
	}
	return r.line(r.r+r.searched+i+1, false), true
}

// line returns buf[r.r:end] as an event and moves past it.
func (r *Reader) line(end int, partial bool) sse.Event {
	raw := r.buf[r.r:end:end]
	data := raw
	if n := len(data); n > 0 && data[n-1] == '\n' {
		data = data[:n-1]
	}
	if n := len(data); n > 0 && data[n-1] == '\r' {
		data = data[:n-1]
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = nil
	}
	r.r, r.searched = end, 0
	return sse.Event{Raw: raw, Data: data, Retry: -1, Partial: partial && data != nil}
}

// fill reads more bytes, sliding or growing the buffer first; it reports
// whether the reader had nothing yet (sse.ErrWouldBlock).
func (r *Reader) fill() (wouldBlock bool) {
	var err error
	r.buf, r.r, r.w, wouldBlock, err = readbuf.Fill(r.rd, r.buf, r.r, r.w, r.max, nil, io.ErrShortBuffer)
	if err != nil {
		r.eof = err == io.EOF
		r.err = err
	}
	return wouldBlock
}
