package sse

import "io"

// ArrayReader reads a stream that is one JSON array sent bit by bit, as
// Google's APIs stream answers when the request does not ask for alt=sse
// ("[{...}\n,\r\n{...}\n]"): element by element as they pass, each
// element's bytes exactly as received, so that a proxy relays the stream
// byte for byte and inspects each element on the way. It has Reader's
// methods and returns its elements as Events, so that a relay written for
// one serves both. An ArrayReader is not safe for concurrent use.
type ArrayReader struct {
	rd   io.Reader
	rdy  Readier
	max  int
	buf  []byte
	r, w int // buf[r:w] is read but not yet returned
	// searched is how much of buf[r:] the scan has walked; depth, inStr
	// and esc are where it stands: depth 0 outside the array, 1 between
	// its elements; start is where in buf[r:] the element being walked
	// began, -1 before one began.
	searched, depth, start int
	inStr, esc             bool
	err                    error
	eof                    bool
}

// NewArrayReader returns an ArrayReader of rd whose buffer grows as needed
// up to max bytes per element (DefaultMaxEventSize if max <= 0).
func NewArrayReader(rd io.Reader, max int) *ArrayReader {
	r := &ArrayReader{max: max}
	if r.max <= 0 {
		r.max = DefaultMaxEventSize
	}
	r.Reset(rd)
	return r
}

// Reset makes r read a new stream from rd, keeping a small buffer.
func (r *ArrayReader) Reset(rd io.Reader) {
	buf := r.buf
	if cap(buf) > 64<<10 {
		buf = nil
	}
	rdy, _ := rd.(Readier)
	*r = ArrayReader{rd: rd, rdy: rdy, max: r.max, buf: buf, start: -1}
}

// Next returns the next element as an event: Raw is the element with the
// bytes before it (the array's "[" or the "," between elements, and
// whitespace), Data the element alone. The array's closing bracket comes
// back as an event without Data; bytes after it, or an element the stream
// cut off (Partial), come back at the end of the stream, and the call
// after it returns io.EOF. Errors are those of Reader.Next: the underlying
// reader's, ErrEventTooLarge (the element so far stays in Buffered) and
// ErrWouldBlock (not sticky).
func (r *ArrayReader) Next() (Event, error) {
	for {
		if ev, ok := r.scan(); ok {
			return ev, nil
		}
		if r.err != nil {
			if r.eof && r.r < r.w {
				return r.element(r.w, true), nil
			}
			return Event{}, r.err
		}
		if r.fill() {
			return Event{}, ErrWouldBlock
		}
	}
}

// NextBuffered returns the next element when all of it is already
// buffered, without reading.
func (r *ArrayReader) NextBuffered() (Event, bool) {
	if r.err != nil {
		return Event{}, false
	}
	return r.scan()
}

// Ready reports whether ReadReady would read.
func (r *ArrayReader) Ready() bool { return r.rdy != nil && r.err == nil && r.rdy.Ready() }

// ReadReady returns the next element as NextBuffered does, reading first
// when it must and the underlying reader holds bytes; it never waits.
func (r *ArrayReader) ReadReady() (Event, bool) {
	if ev, ok := r.NextBuffered(); ok {
		return ev, true
	}
	if !r.Ready() {
		return Event{}, false
	}
	r.fill()
	return r.scan()
}

// Buffered returns the bytes read but not yet returned in an event.
func (r *ArrayReader) Buffered() []byte { return r.buf[r.r:r.w] }

// scan walks the buffered bytes from where it stopped, and returns the
// event that ends an element or the array.
func (r *ArrayReader) scan() (Event, bool) {
	for i := r.r + r.searched; i < r.w; i++ {
		c := r.buf[i]
		if r.inStr {
			switch {
			case r.esc:
				r.esc = false
			case c == '\\':
				r.esc = true
			case c == '"':
				r.inStr = false
			}
			continue
		}
		switch c {
		case '"':
			r.inStr = true
			r.begin(i)
		case '{', '[':
			r.begin(i)
			r.depth++
		case '}', ']':
			r.depth--
			switch {
			case r.depth == 1:
				return r.element(i+1, false), true
			case r.depth <= 0:
				r.depth = 0
				return r.element(i+1, false), true
			}
		}
	}
	r.searched = r.w - r.r
	return Event{}, false
}

// begin notes that an element may start at buf[i].
func (r *ArrayReader) begin(i int) {
	if r.depth == 1 && r.start < 0 {
		r.start = i - r.r
	}
}

// element returns buf[r.r:end] as an event and moves past it.
func (r *ArrayReader) element(end int, partial bool) Event {
	raw := r.buf[r.r:end:end]
	var data []byte
	if r.start >= 0 {
		data = raw[r.start:]
	}
	r.r, r.searched, r.start = end, 0, -1
	return Event{Raw: raw, Data: data, Retry: -1, Partial: partial && data != nil}
}

// fill reads more bytes, sliding or growing the buffer first; it reports
// whether the reader had nothing yet (ErrWouldBlock).
func (r *ArrayReader) fill() (wouldBlock bool) {
	if r.buf == nil {
		r.buf = make([]byte, min(initialBufSize, r.max))
	}
	if r.r > 0 && (r.r == r.w || len(r.buf)-r.w < len(r.buf)/4) {
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
	}
	if r.w == len(r.buf) {
		if r.w-r.r >= r.max {
			r.err = ErrEventTooLarge
			return false
		}
		nb := make([]byte, min(2*len(r.buf), r.max))
		r.w = copy(nb, r.buf[r.r:r.w])
		r.r = 0
		r.buf = nb
	}
	for range maxEmptyReads {
		n, err := r.rd.Read(r.buf[r.w:])
		if n < 0 || n > len(r.buf)-r.w {
			r.err = io.ErrShortBuffer
			return false
		}
		r.w += n
		if err == ErrWouldBlock {
			return n == 0
		}
		if err != nil {
			if err == io.EOF {
				r.eof = true
			}
			r.err = err
			return false
		}
		if n > 0 {
			return false
		}
	}
	r.err = io.ErrNoProgress
	return false
}
