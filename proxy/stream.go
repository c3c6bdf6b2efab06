package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/ndjson"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// A streamed answer (SSE, or Ollama's NDJSON) goes back to the client here,
// read top to bottom:
//
//   - relayStream sets the stream up once the upstream's headers came: the
//     observer sees them, and fasthttp hands the connection over to a
//     goroutine of the stream's own, which writes it (streambody.go).
//   - openStream.relay runs the stream; relayBody relays it within the
//     upstream socket's pump (upstreamBody.pump, at the end of this file),
//     or with plain reads where there is no pump.
//   - streamRelay.relay is the event loop: read an event, ask the observer
//     what the client gets and whether the stream stops (answerObserver,
//     answer_observer.go, which reads the event through the API's answer
//     and writes a cut's end with it), write it, flush. A stream the
//     upstream compressed anyway takes the same loop, decoded
//     (encoding_stream.go).
//   - streamRelay's next, event and end run the parser and the observer
//     under a recover: a panic there passes the rest through unparsed
//     (fail open, failsafe.go).
//   - A cut, a client gone or the request deadline end in
//     openStream.abort, which shuts the upstream's connection at once so
//     the model stops generating; openStream.end writes what is left (held
//     events, an in-band error) and accounts for the stream.
//
// docs/streams.md says why the stream path is shaped as it is.

// relayStream forwards a streamed response event by event as framing
// frames it (an SSE event, an NDJSON line, a JSON array's element),
// flushing after each, and owns resp until the stream ends.
func (s *Server) relayStream(ctx *fasthttp.RequestCtx, ub *upstreamBody, obs responseObserver, start time.Time, headerLatency time.Duration, framing wireapi.Framing) {
	status := ctx.Response.StatusCode()
	// nginx and similar proxies in front of us must not buffer the stream
	// (docs/streams.md: buffering).
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	// A guarded stream the upstream coded anyway is decoded as it comes
	// and relayed decoded (encoding_stream.go), so the observer and the
	// client see the events plain; one in a coding loopguard cannot read
	// passes as sent, uninspected (the observer sees its Content-Encoding).
	var dec *decodedStream
	if ce := ctx.Response.Header.ContentEncoding(); obs != nil && len(ce) > 0 {
		if cs, err := parseCodings(ce); err == nil && !cs.empty() {
			ctx.Response.Header.Del(fasthttp.HeaderContentEncoding)
			dec = newDecodedStream(ub, cs)
		}
	}
	observed := obs != nil && s.observeHeader(obs, status, &ctx.Response.Header)
	// The request went upstream whole, and an agent's history (often
	// hundreds of kilobytes) would stay in memory for the stream's whole
	// life. SwapBody hands its buffer over instead of pooling it: whatever
	// might still view the bytes keeps them valid.
	ctx.Request.SwapBody(nil)
	// What the stream writer needs is copied out now: RequestCtx must not be
	// touched once the handler has returned.
	// An observer whose header panicked sees nothing of the stream.
	dropped := obs != nil && !observed
	st := &openStream{
		s: s, ub: ub, conn: ctx.Conn(), status: status, start: start, headerLatency: headerLatency,
		method: append([]byte(nil), ctx.Method()...), path: append([]byte(nil), ctx.Path()...),
		rl:  streamRelay{s: s, obs: obs, raw: dropped, ended: dropped},
		dec: dec,
	}
	var src io.Reader = ub
	if dec != nil {
		src = dec
	}
	st.rl.framing = framing
	switch framing {
	case wireapi.NDJSON:
		st.rl.other = ndjson.NewReader(src, s.cfg.Stream.MaxEventBytes)
	case wireapi.JSONArray:
		st.rl.other = sse.NewArrayReader(src, s.cfg.Stream.MaxEventBytes)
	default:
		st.rl.rd = sse.NewReader(src, s.cfg.Stream.MaxEventBytes)
	}
	if d := s.cfg.Upstream.RequestTimeout; d > 0 {
		st.timer = time.AfterFunc(d-time.Since(start), func() { st.abort(errDeadline) })
	}
	s.obs.StreamOpened()
	s.setStreamWriter(ctx, st.relay)
}

// openStream is one stream that relayStream relays. It lives on the heap,
// not in the frame of the writer's function: the relay's goroutine waits
// for every event with the detectors' deepest calls on top of its frames,
// and thousands of open streams each keep the stack that made (docs/streams.md).
type openStream struct {
	s      *Server
	ub     *upstreamBody
	conn   net.Conn
	status int
	start  time.Time
	// headerLatency is the time to the upstream's response headers.
	headerLatency time.Duration
	method, path  []byte
	timer         *time.Timer // the request deadline
	// cause is why the stream ended early (client gone, cut, deadline);
	// the first wins.
	cause atomic.Pointer[error]
	rl    streamRelay
	stats relayStats
	// dec decodes a stream the upstream coded (encoding_stream.go); nil
	// for the others.
	dec *decodedStream
}

// abort ends the stream early, from any goroutine (the peer watcher's,
// the request deadline's), and never waits: the relay may be blocked in a
// write to a client that stopped reading, and closing the upstream
// connection would wait for the pump that runs the relay. So the upstream
// connection is shut, which the model sees at once, and a client that left
// has its connection closed, which ends a write stuck on it; the relay then
// ends the stream and closes what it owns (end).
func (st *openStream) abort(err error) {
	if st.cause.CompareAndSwap(nil, &err) {
		st.ub.interrupt()
		if err == errClientGone {
			_ = st.conn.Close()
		}
	}
}

// relay is the stream's body writer.
func (st *openStream) relay(w *bufio.Writer) {
	watch := st.s.peers.watch(st.conn, func() { st.abort(errClientGone) })
	var stop error
	if st.dec != nil {
		// Decoded bytes cannot be pumped: the decoder reads with reads
		// that wait.
		_, stop = st.rl.relay(w, st.dec, st.start, &st.stats, false)
	} else {
		stop = st.rl.relayBody(w, st.ub, st.start, &st.stats)
	}
	if stop != nil {
		st.abort(stop)
	}
	st.end(w, watch)
}

// end writes what is left once the upstream's stream is over, and accounts
// for the stream. Its frame is on the stack only then.
//
//go:noinline
func (st *openStream) end(w *bufio.Writer, watch *peerWatch) {
	written, readErr := st.stats.written, st.stats.readErr
	// The stream is over: what the observer held back (tail = "trim",
	// held tool calls) goes out before anything of loopguard's own.
	if tail := st.rl.end(); len(tail) > 0 {
		n, _ := w.Write(tail)
		written += int64(n)
		_ = w.Flush()
	}
	c := st.cause.Load()
	if readErr != nil && (c == nil || *c == errDeadline) {
		// The upstream failed mid-stream: tell the client in-band, the
		// only way left once the status line is sent (docs/streams.md:
		// errors inside a 200 stream).
		reason := readErr
		if c != nil {
			reason = *c
		}
		switch st.rl.framing {
		case wireapi.NDJSON:
			_, _ = w.Write(ndjsonErrorLine(reason))
		case wireapi.JSONArray:
			// An array has no room for an error after its elements: the
			// array left open tells the client the answer broke off.
		default:
			_, _ = w.Write(sseErrorEvent(reason))
		}
		_ = w.Flush()
	}
	watch.stop()
	if st.timer != nil {
		st.timer.Stop()
	}
	final := readErr
	if c != nil {
		final = *c
	}
	st.ub.Close(final)
	if st.dec != nil {
		st.dec.close()
	}
	st.s.respond(st.rl.obs, st.method, st.path, final, observe.ResponseInfo{Status: st.status, Streamed: true,
		UpstreamLatency: st.headerLatency, TTFB: st.stats.ttfb, Duration: time.Since(st.start), Events: st.stats.events, Bytes: written})
}

// relayStats is what relay counts of a stream.
type relayStats struct {
	events  int
	written int64
	ttfb    time.Duration // from start to the first event's flush
	readErr error         // the upstream failed mid-stream
}

// relayBody relays ub's stream with relay. A body that can be pumped
// (upstreamBody.pump) is relayed within the pump, where the read after an
// event that finds nothing yet costs no system call.
func (r *streamRelay) relayBody(w *bufio.Writer, ub *upstreamBody, start time.Time, st *relayStats) (stop error) {
	at := relayWait
	pumped, err := ub.pump(func() bool {
		at, stop = r.relay(w, ub, start, st, true)
		return at != relayWait
	})
	switch {
	case !pumped:
	case at == relayWait: // what ended the pump's wait: idle, closed
		st.readErr = err
		return nil
	case at == relayEnded:
		return stop
	}
	_, stop = r.relay(w, ub, start, st, false)
	return stop
}

// relayed is where relay left a stream.
type relayed uint8

const (
	relayEnded  relayed = iota // the stream is over: stop and st.readErr say how
	relayWait                  // pumped: a read would wait; relay again once the upstream sent more
	relayUnpump                // pumped: the rest is copied unparsed, with reads that wait; relay again unpumped
)

// relay copies the stream from r.rd to w until it ends: event by event,
// each flushed as it comes, or the rest as it comes when it cannot be
// parsed. src is r.rd's reader. It returns errClientGone when a flush
// failed and errCut when the observer stopped the stream, nil when the
// upstream ended it (st.readErr says how).
//
// pumped says that src's reads never wait (sse.ErrWouldBlock): relay then
// returns relayWait once it relayed all that came, and relayUnpump rather
// than copy the rest with reads that wait.
//
// An event costs one read, one scan for its end, one write and one flush,
// and no allocation (TestRelayEventAllocs); inspection adds the observer's
// event call. Events that one read brought together (an upstream ahead of
// its client, and what it sent ahead of that read, which the next reads
// return at once) go out in one write and one flush, as they came.
func (r *streamRelay) relay(w *bufio.Writer, src io.Reader, start time.Time, st *relayStats, pumped bool) (at relayed, stop error) {
	var batch *[]byte // events read together and not yet written; pooled
	ready := false    // r.ev is an event NextBuffered returned
	for {
		var err error
		if !ready {
			// Nothing is held in batch here, so relay may return and be
			// called again.
			if err = r.next(); err == sse.ErrWouldBlock {
				return relayWait, nil
			}
		}
		ready = false
		if len(r.ev.Raw) > 0 {
			st.events++
			out, cut := r.event(&r.ev)
			batched := 0
			if batch != nil {
				batched = len(*batch)
			}
			if !cut && err == nil && !r.raw && batched+len(out) <= batchMax {
				// out may alias the observer's buffer, which the next event
				// reuses, or the reader's, which reading moves: keep a copy
				// before either.
				ok := r.nextBuffered(false)
				if !ok && !r.raw && r.ready() {
					batch = appendBatch(batch, out)
					out = nil
					ok = r.nextBuffered(true)
				}
				if ok {
					if out != nil {
						batch = appendBatch(batch, out)
					}
					ready = true
					continue
				}
			}
			held := batch
			if held != nil {
				batch = nil
				if len(*held)+len(out) <= cap(*held) {
					out = append(*held, out...)
				} else {
					// A large event after a burst: the burst goes first.
					n, _ := w.Write(*held)
					st.written += int64(n)
				}
			}
			n, _ := w.Write(out)
			st.written += int64(n)
			if held != nil {
				*held = (*held)[:0]
				batchBufs.Put(held)
			}
			if ferr := w.Flush(); ferr != nil {
				return relayEnded, errClientGone
			}
			if st.ttfb == 0 {
				st.ttfb = time.Since(start)
			}
			if cut {
				return relayEnded, errCut
			}
		}
		if (err == sse.ErrEventTooLarge || r.raw) && pumped {
			return relayUnpump, nil
		}
		if err == sse.ErrEventTooLarge || r.raw {
			r.passRest(w, src, st)
			return relayEnded, nil
		}
		if err != nil {
			if err != io.EOF {
				st.readErr = err
			}
			return relayEnded, nil
		}
	}
}

// passRest passes the rest of the stream through as it comes, unparsed,
// after what the observer held back: after one event beyond
// stream.max_event_bytes (docs/streams.md: long lines), or a panic while
// parsing or observing (fail open). It is not inlined in relay, whose
// frame every event's inspection runs under.
//
//go:noinline
func (r *streamRelay) passRest(w *bufio.Writer, src io.Reader, st *relayStats) {
	n, err := w.Write(r.end())
	st.written += int64(n)
	if err == nil {
		n, err = w.Write(r.buffered())
		st.written += int64(n)
	}
	if err == nil {
		buf := copyBufs.Get().(*[]byte)
		var m int64
		m, err = io.CopyBuffer(flushWriter{w}, src, *buf)
		copyBufs.Put(buf)
		st.written += m
	}
	if err != nil && !errors.Is(err, io.EOF) {
		st.readErr = err
	}
}

// batchMax bounds the events relay sends in one write, framed as one chunk
// (streamBody).
const batchMax = 8 << 10

// batchBufs hold the events of one read until they are written; a stream
// holds one only while it relays a burst.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, batchMax); return &b }}

// appendBatch appends out to batch, taking one from batchBufs first if nil.
func appendBatch(batch *[]byte, out []byte) *[]byte {
	if batch == nil {
		batch = batchBufs.Get().(*[]byte)
	}
	*batch = append(*batch, out...)
	return batch
}

// streamRelay is what relayStream's event loop calls to parse and observe
// a stream, with a recover around each call. After a panic, raw is set:
// the loop stops parsing and copies the rest of the stream as it comes.
type streamRelay struct {
	s   *Server
	obs responseObserver // nil: events are forwarded as they are
	rd  *sse.Reader
	// other, when not nil, reads a stream not framed as SSE in rd's
	// place: an NDJSON stream (Ollama's) one line an event, a JSON array
	// (Gemini's without alt=sse) one element an event.
	other eventReader
	// framing is the stream's (wireapi.SSE when rd reads it).
	framing wireapi.Framing
	// ev is the current event: one for the whole stream, as &ev goes to
	// the observer and a fresh variable per event would escape each time.
	ev    sse.Event
	out   []byte // what the client gets for the current event; reused
	raw   bool   // parsing or observing failed: pass the rest through
	ended bool   // obs.end was called, or event stopped the stream
}

// fail counts and logs the first panic of the stream and sets raw; obs is
// the observer the panic was in, nil for the reader.
func (r *streamRelay) fail(obs responseObserver, where string, p any) {
	if obs != nil {
		obs.abandon()
	}
	if !r.raw {
		r.s.recovered(nil, where, p)
	}
	r.raw = true
}

// next reads the next event into ev. A panic in the reader leaves the
// event's bytes in rd.Buffered and sets raw. The event is stored, not
// returned: each frame an Event passes through by value holds a copy, and
// every event's inspection runs under relay's (docs/streams.md).
func (r *streamRelay) next() (err error) {
	if r.raw {
		r.ev = sse.Event{}
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			r.fail(nil, "sse", p)
			r.ev, err = sse.Event{}, nil
		}
	}()
	r.ev, err = r.reader().Next()
	return err
}

// nextBuffered reads the next event into ev, as next does, when the
// reader holds all of it; false when it must read first, or it panicked
// (then raw is set); ev is then empty. With read, it first reads what the
// upstream sent ahead and holds ready (sse.Reader.ReadReady): that moves
// the reader's buffer, and the events returned before are invalid after
// it.
func (r *streamRelay) nextBuffered(read bool) (ok bool) {
	if r.raw {
		r.ev = sse.Event{}
		return false
	}
	defer func() {
		if p := recover(); p != nil {
			r.fail(nil, "sse", p)
			r.ev, ok = sse.Event{}, false
		}
	}()
	// One call: each call site would keep its own copy of the event in
	// the frame.
	next := r.reader().NextBuffered
	if read {
		next = r.reader().ReadReady
	}
	r.ev, ok = next()
	return ok
}

// reader is the stream's reader: other, or rd.
func (r *streamRelay) reader() eventReader {
	if r.other != nil {
		return r.other
	}
	return r.rd
}

// event returns what the client gets for ev and whether the stream stops
// after it. When the observer panics, the client gets what it held, then
// ev as the upstream sent it, and raw is set. That is every byte when the
// panic came, as it does in sse/ and the detectors, before the observer
// took ev in; the observer is not trusted to say more.
func (r *streamRelay) event(ev *sse.Event) (out []byte, stop bool) {
	if r.obs == nil {
		return ev.Raw, false
	}
	defer func() {
		if p := recover(); p != nil {
			r.fail(r.obs, "event", p)
			r.out = append(r.end(), ev.Raw...)
			out, stop = r.out, false
		}
	}()
	r.out, stop = r.obs.event(ev, r.out[:0])
	r.ended = stop
	return r.out, stop
}

// end returns what the observer still holds back, once: nil after a stop,
// or when the observer panics again.
func (r *streamRelay) end() (out []byte) {
	if r.obs == nil || r.ended {
		return nil
	}
	r.ended = true
	defer func() {
		if p := recover(); p != nil {
			r.fail(r.obs, "end", p)
			out = nil
		}
	}()
	r.out = r.obs.end(r.out[:0])
	return r.out
}

// buffered is what the reader read past the last event it returned; nil if
// even that panics.
func (r *streamRelay) buffered() (b []byte) {
	defer func() {
		if p := recover(); p != nil {
			r.fail(nil, "sse", p)
			b = nil
		}
	}()
	if r.other != nil {
		return r.other.Buffered()
	}
	return r.rd.Buffered()
}

// ready reports that the reader's source holds bytes it can read at once.
func (r *streamRelay) ready() bool {
	if r.other != nil {
		return r.other.Ready()
	}
	return r.rd.Ready()
}

// eventReader reads a stream not framed as SSE and returns its units as
// sse.Reader returns events, with its methods: ndjson.Reader (NDJSON
// lines), sse.ArrayReader (a JSON array's elements).
type eventReader interface {
	Next() (sse.Event, error)
	NextBuffered() (sse.Event, bool)
	ReadReady() (sse.Event, bool)
	Buffered() []byte
	Ready() bool
}

var (
	_ eventReader = (*ndjson.Reader)(nil)
	_ eventReader = (*sse.ArrayReader)(nil)
)

// pumper is a connection that can be pumped: rawsock.Conn on Linux.
type pumper interface {
	Pump(step func() bool) error
}

// pump runs step as rawsock.Conn.Pump does, while Read returns
// sse.ErrWouldBlock rather than wait, for a chunked body read from a plain
// TCP connection; false, without calling step, for any other. The body's
// idle timeout counts from when step last returned false having read
// something; pump ends with errIdle once it passed, or with what else
// ended the wait (the connection closed).
func (b *upstreamBody) pump(step func() bool) (pumped bool, err error) {
	cb, chunked := b.r.(*chunkedBody)
	p, ok := b.conn.Conn.(pumper)
	if !chunked || cb.own == nil || !ok || b.raw != net.Conn(b.conn) || b.closed.Load() {
		return false, nil
	}
	b.pumped = true
	read := b.conn.read.Load() // the connection's bytes read when step last waited
	idleStep := func() bool {
		if step() {
			return true
		}
		// The wait starts now if bytes came since the last; a call that
		// found nothing (the first after a deadline was moved) goes on
		// waiting from when it was.
		if b.idle > 0 && b.conn.read.Load() != read {
			read = b.conn.read.Load()
			b.conn.waitFrom = time.Now()
		}
		return false
	}
	for {
		err = p.Pump(idleStep)
		if err == nil || b.idle == 0 || !isTimeout(err) {
			break
		}
		due := b.conn.waitFrom.Add(b.idle)
		if !time.Now().Before(due) {
			err = errIdle
			break
		}
		// The deadline was armed an idle period before: the relay was busy
		// since (trackedConn.Read).
		_ = b.conn.Conn.SetReadDeadline(due)
	}
	b.pumped = false
	return true, err
}

// flushWriter flushes after every write, for raw pass-through of a stream
// that could not be parsed.
type flushWriter struct{ w *bufio.Writer }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.w.Flush()
	}
	return n, err
}
