package sse

import (
	"bytes"
	"errors"
	"io"

	"github.com/loopguard/loopguard/internal/readbuf"
)

// ErrEventTooLarge reports an event longer than the reader's maximum. The
// bytes read so far stay available from Reader.Buffered, so a caller can fall
// back to copying the rest of the stream unparsed.
var ErrEventTooLarge = readbuf.ErrTooLarge

// ErrWouldBlock is what a non-blocking reader returns when it has no bytes
// yet but may later (a socket read from the goroutine that waits for it to
// become readable, as a proxy relaying many streams does). Next returns it
// with no event and keeps its state: the next call reads again. It is never
// sticky, as other errors are.
var ErrWouldBlock = readbuf.ErrWouldBlock

// errInvalidRead reports an io.Reader that returned an impossible count.
var errInvalidRead = errors.New("sse: reader returned invalid count")

// DefaultMaxEventSize is the per-event limit NewReader uses when given a
// maximum of zero or less. Tool calls that write whole files put megabytes of
// arguments on one data line, so the default is generous.
const DefaultMaxEventSize = 16 << 20

// bom is the UTF-8 byte order mark a stream may start with (WHATWG: one
// leading BOM is ignored).
const bom = "\xEF\xBB\xBF"

// Event is one SSE event as received: a block of lines ended by a blank line,
// or a comment block, or the blank line of a keep-alive.
//
// Its slices alias the Reader's buffers and are valid until the next call to
// Next or Reset; copy what must outlive that.
type Event struct {
	// Raw is the event's bytes exactly as received, terminating blank line
	// included. Concatenating Raw of every event returned yields the stream.
	// When an event ended with a CR that was the last byte received so far,
	// the event is returned at once and an LF that follows (the rest of a
	// CRLF) opens the next event's Raw.
	Raw []byte
	// Name is the value of the event: field, nil if absent.
	Name []byte
	// Data is the data: lines joined with '\n', nil if the event had no
	// data: field (a WHATWG client dispatches an event only when it has one).
	Data []byte
	// ID is the value of the id: field, nil if absent.
	ID []byte
	// Retry is the value of a well-formed retry: field in milliseconds, -1 if
	// absent.
	Retry int
	// Comment is true when the event held comment lines (":...", ": ping",
	// a bare ":") and no field at all.
	Comment bool
	// Error is the value of the non-standard error: field that llama.cpp
	// builds through 2025 sent instead of a data: payload at HTTP 200
	// (llama.cpp PR #16109, issue #14566); spec parsers drop it. Nil if absent.
	Error []byte
	// Partial is true for an event cut off by the end of the stream: it has
	// content but no terminating blank line (a WHATWG client would discard
	// it). Its Raw and fields are still reported so a proxy can forward it.
	Partial bool
}

// Blank reports whether the event is only line endings: an empty keep-alive
// line, or the LF completing a CRLF split across reads.
func (e Event) Blank() bool {
	for _, c := range e.Raw {
		if c != '\n' && c != '\r' {
			return false
		}
	}
	return len(e.Raw) > 0
}

// span locates a field value inside the current event's bytes. Offsets
// count from the event's first byte so that sliding the buffer keeps them
// valid. The zero span is absent, so resetting state is a memclr.
type span struct {
	off, end int
	set      bool
}

// eventState is what the lines of the event being read have set so far.
type eventState struct {
	name, id, errf span
	data           span // the first data line; later ones are in Reader.data
	dataLines      int
	retry          int // retry+1; 0 when absent
	comments       int
	fields         int
}

// Reader splits a byte stream into SSE events following the WHATWG
// event-stream grammar: LF, CRLF or lone-CR line endings, comments, the
// event/data/id/retry fields, one leading BOM. Events may be split across
// reads at any byte.
//
// A Reader buffers at most max bytes of one event (plus its joined data), so
// memory stays bounded whatever the upstream sends. It never copies an event
// with a single data line. A Reader is not safe for concurrent use.
type Reader struct {
	rd   io.Reader
	rdy  Readier // rd, when it can say it holds bytes
	max  int
	buf  []byte
	r, w int    // buf[r:w] is read but not yet returned; r is the event start
	data []byte // data lines joined, used from the second data line on
	err  error  // sticky; returned once buffered events are drained
	eof  bool   // rd reported io.EOF

	bomChecked bool
	crPending  bool // the last line ended with a CR that was the last byte buffered
	line       int  // start of the next unparsed line, from r
	searched   int  // no line ending before this offset from r: long lines are scanned once
	ev         eventState
	// cr is the buf index of the next CR once found, -1 if not; buf[:crClean]
	// past the scan position holds none. Searching CRs per read rather than
	// per line halves the scanning of LF-only streams.
	cr, crClean int
}

// NewReader returns a Reader of rd whose buffer grows as needed up to max
// bytes per event (DefaultMaxEventSize if max <= 0).
func NewReader(rd io.Reader, max int) *Reader {
	r := &Reader{max: max}
	if r.max <= 0 {
		r.max = DefaultMaxEventSize
	}
	r.Reset(rd)
	return r
}

// Reset makes r read a new stream from rd, keeping its maximum and, when
// they are small, its buffers, so Readers can be pooled.
func (r *Reader) Reset(rd io.Reader) {
	const keep = 64 << 10 // don't let one huge event pin memory in a pool
	buf, data := r.buf, r.data[:0]
	if cap(buf) > keep {
		buf = nil
	}
	if cap(data) > keep {
		data = nil
	}
	rdy, _ := rd.(Readier)
	*r = Reader{rd: rd, rdy: rdy, max: r.max, buf: buf, data: data, cr: -1}
}

// Readier is an io.Reader that can tell, without blocking, that a Read
// would return bytes at once: bytes the source received and buffered but
// were not read yet (a proxy's upstream connection when the upstream is
// ahead of its client).
type Readier interface {
	Ready() bool
}

// Buffered returns the bytes read from the underlying reader but not yet
// returned in an event. After ErrEventTooLarge or a read error they are the
// start of the unfinished event: a proxy forwards them and then copies the
// rest of the stream as is. The slice is valid until the next Next or Reset.
func (r *Reader) Buffered() []byte { return r.buf[r.r:r.w] }

// Next returns the next event. Bytes after the last blank line of a stream
// come back as a final event (Raw set, fields parsed, Partial true if it had
// content) and the call after it returns io.EOF. Other errors from the
// underlying reader, and ErrEventTooLarge, are returned as they are, with no
// event; the unconsumed bytes stay in Buffered. Errors are sticky, but for
// ErrWouldBlock.
func (r *Reader) Next() (Event, error) {
	for {
		if ev, ok := r.scan(); ok {
			return ev, nil
		}
		if r.err != nil {
			if r.eof && r.r < r.w {
				return r.trailing(), nil
			}
			return Event{}, r.err
		}
		if r.fill() {
			return Event{}, ErrWouldBlock
		}
	}
}

// NextBuffered returns the next event when all of it is already buffered,
// without reading; false when Next would have to read (or report an
// error). A proxy that relays events one by one uses it to send the events
// one read brought in one write. The event is valid as Next's is.
func (r *Reader) NextBuffered() (Event, bool) {
	if r.err != nil {
		return Event{}, false
	}
	return r.scan()
}

// Ready reports whether ReadReady would read: the underlying reader is a
// Readier that holds bytes, and no error ended the stream.
func (r *Reader) Ready() bool {
	return r.rdy != nil && r.err == nil && r.rdy.Ready()
}

// ReadReady returns the next event as NextBuffered does, reading first,
// when it must and Ready, the bytes the underlying reader holds; it never
// waits for bytes still to come. A proxy uses it to send the events an
// upstream sent ahead in one write. Reading may move the buffer: the events
// returned before are invalid after ReadReady, as after Next.
func (r *Reader) ReadReady() (Event, bool) {
	if ev, ok := r.NextBuffered(); ok {
		return ev, true
	}
	if !r.Ready() {
		return Event{}, false
	}
	r.fill()
	return r.scan()
}

// scan parses the lines buffered after r.line and returns the event once
// its blank line is there.
func (r *Reader) scan() (Event, bool) {
	b := r.buf[r.r:r.w]
	if !r.bomChecked {
		n := min(len(b), len(bom))
		if b2 := b[:n]; string(b2) != bom[:n] {
			r.bomChecked = true
		} else if n == len(bom) {
			r.bomChecked = true
			r.line = len(bom)
		} else if !r.eof {
			return Event{}, false // a BOM prefix: wait for the rest
		} else {
			r.bomChecked = true
		}
	}
	for {
		if r.crPending {
			if r.line >= len(b) {
				return Event{}, false
			}
			if b[r.line] == '\n' {
				r.line++
			}
			r.crPending = false
		}
		if r.line < len(b) && b[r.line] == '\n' {
			// Fast path: the blank LF line that ends most events.
			r.line++
			return r.dispatch(r.line, false), true
		}
		from := max(r.line, r.searched)
		i := r.indexEOL(b[from:], r.r+from)
		if i < 0 {
			r.searched = len(b)
			return Event{}, false
		}
		start, end := r.line, from+i
		next := end + 1
		if b[end] == '\r' {
			if next < len(b) {
				if b[next] == '\n' {
					next++
				}
			} else if !r.eof {
				// Can't tell CRLF from a lone CR yet. Don't wait for the
				// next read (it may come seconds later): take the CR as the
				// ending and skip an LF that starts the next read.
				r.crPending = true
			}
		}
		r.line = next
		if start == end {
			return r.dispatch(next, false), true
		}
		r.parseLine(b, start, end)
	}
}

// indexEOL returns the index of the first CR or LF in b, which starts at
// buf[abs], or -1.
func (r *Reader) indexEOL(b []byte, abs int) int {
	// Vectorised searches beat a byte loop; the CR one is remembered across
	// lines because most streams never send a CR.
	n := bytes.IndexByte(b, '\n')
	if r.cr < abs {
		r.cr = -1
		from := max(abs, r.crClean)
		if c := bytes.IndexByte(r.buf[from:r.w], '\r'); c >= 0 {
			r.cr = from + c
		} else {
			r.crClean = r.w
		}
	}
	if r.cr >= 0 && (n < 0 || r.cr-abs < n) {
		return r.cr - abs
	}
	return n
}

// shift records that the buffer's bytes moved down by d.
func (r *Reader) shift(d int) {
	if r.cr >= 0 {
		r.cr -= d
	}
	r.crClean = max(r.crClean-d, 0)
}

// parseLine applies one non-empty line, b[start:end], to the event state.
func (r *Reader) parseLine(b []byte, start, end int) {
	line := b[start:end]
	if line[0] == ':' {
		r.ev.comments++
		return
	}
	r.ev.fields++
	name, val := line, span{off: end, end: end}
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		name = line[:c]
		val.off = start + c + 1
		if val.off < end && b[val.off] == ' ' {
			val.off++
		}
	}
	switch string(name) {
	case "data":
		val.set = true
		r.ev.dataLines++
		switch r.ev.dataLines {
		case 1:
			r.ev.data = val
		case 2:
			r.data = append(r.data[:0], b[r.ev.data.off:r.ev.data.end]...)
			fallthrough
		default:
			r.data = append(r.data, '\n')
			r.data = append(r.data, b[val.off:val.end]...)
		}
	case "event":
		val.set = true
		r.ev.name = val
	case "id":
		// WHATWG: an id containing NULL is ignored.
		if bytes.IndexByte(b[val.off:val.end], 0) < 0 {
			val.set = true
			r.ev.id = val
		}
	case "retry":
		if n, ok := parseRetry(b[val.off:val.end]); ok {
			r.ev.retry = n + 1
		}
	case "error":
		val.set = true
		r.ev.errf = val
	}
	// Other field names are ignored (WHATWG); their bytes stay in Raw.
}

// parseRetry parses a retry: value, which must be ASCII digits only.
func parseRetry(v []byte) (int, bool) {
	if len(v) == 0 {
		return 0, false
	}
	const limit = 1<<31 - 1
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int(c-'0'), limit)
	}
	return n, true
}

// dispatch returns the event made of the next n buffered bytes and starts a
// new one after them.
func (r *Reader) dispatch(n int, partial bool) Event {
	b := r.buf[r.r : r.r+n]
	ev := Event{
		Raw:     b[:n:n],
		Name:    r.ev.name.in(b),
		ID:      r.ev.id.in(b),
		Error:   r.ev.errf.in(b),
		Retry:   r.ev.retry - 1,
		Comment: r.ev.comments > 0 && r.ev.fields == 0,
		Partial: partial,
	}
	switch r.ev.dataLines {
	case 0:
	case 1:
		ev.Data = r.ev.data.in(b)
	default:
		ev.Data = r.data
	}
	r.r += n
	r.line, r.searched = 0, 0
	r.ev = eventState{}
	return ev
}

func (s span) in(b []byte) []byte {
	if !s.set {
		return nil
	}
	return b[s.off:s.end:s.end]
}

// trailing returns what is left at EOF as a final event.
func (r *Reader) trailing() Event {
	b := r.buf[r.r:r.w]
	if r.crPending && r.line < len(b) && b[r.line] == '\n' {
		r.line++
	}
	r.crPending = false
	if r.line < len(b) {
		// The last line has no ending; scan left it unparsed.
		r.parseLine(b, r.line, len(b))
	}
	return r.dispatch(len(b), r.ev.fields+r.ev.comments > 0)
}

// fill reads more bytes, sliding or growing the buffer first; failures are
// left in r.err. It reports whether the reader had nothing yet
// (ErrWouldBlock).
func (r *Reader) fill() (wouldBlock bool) {
	var err error
	r.buf, r.r, r.w, wouldBlock, err = readbuf.Fill(r.rd, r.buf, r.r, r.w, r.max, r.shift, errInvalidRead)
	if err != nil {
		r.eof = err == io.EOF
		r.err = err
	}
	return wouldBlock
}
