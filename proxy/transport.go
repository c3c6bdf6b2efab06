package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// transport.go sends one request upstream and hands back its response. The
// fasthttp.HostClient is used as a connection pool only: the exchange itself
// is ours, because a proxy in front of LLM servers needs three things
// HostClient.Do cannot give it:
//
//   - a request that fails on a reused pooled connection before any response
//     byte arrived is sent once more, on a fresh connection: the upstream
//     closed an idle connection without saying `Connection: close`
//     (llama-server after every stream, uvicorn after its keep-alive, load
//     balancers at their idle timeout). Whatever the method when writing it
//     failed, since the request never reached the model; once it was written
//     whole, the upstream may have read it, so only a request that may be
//     repeated (replayable). HostClient reports that case as a bare io.EOF,
//     reset or broken pipe, without saying whether the connection was reused.
//   - an idle connection the upstream has already closed is noticed before
//     reuse, with a non-blocking peek, so most of those retries never happen.
//   - the connection a request waits on can be closed when the client leaves
//     before the response headers arrive, so the model stops generating.

// maxResponseHeaderBytes bounds upstream response headers. The pooled read
// buffer (upstream.ReadBufferSize) is smaller; headers that do not fit in it
// are read again with a buffer of this size, for that response only.
const maxResponseHeaderBytes = 256 << 10

// exchange is one request's trip upstream. While the request waits for the
// response headers it holds the connection, so that abort can close it.
type exchange struct {
	mu      sync.Mutex
	conn    net.Conn
	aborted error
	// clientGone aborts with errClientGone; made once per pooled exchange.
	clientGone func()
	// inference: the request is an inference call on an API loopguard
	// guards, which a close that crossed it may have it send again
	// (crossedWindow).
	inference bool
	// iov holds the request's header and body while writeRequest sends
	// them (net.Buffers of a local would be allocated per request).
	iov [2][]byte
	out net.Buffers
}

// exchanges are reused: one is taken for every forwarded request.
var exchanges = sync.Pool{New: func() any {
	x := &exchange{}
	x.clientGone = func() { x.abort(errClientGone) }
	return x
}}

// acquireExchange returns an exchange that nothing has aborted.
func acquireExchange() *exchange { return exchanges.Get().(*exchange) }

// releaseExchange returns x to the pool; nothing may use it afterwards (the
// client watch that calls its clientGone must be stopped).
func releaseExchange(x *exchange) {
	x.conn, x.aborted, x.inference = nil, nil, false
	exchanges.Put(x)
}

// abort ends the exchange: the connection it waits on is closed, and no new
// one is attached. The first cause wins.
func (x *exchange) abort(cause error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.aborted == nil {
		x.aborted = cause
	}
	if x.conn != nil {
		_ = x.conn.Close()
	}
}

func (x *exchange) attach(c net.Conn) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.conn = c
	return x.aborted
}

// detach releases the connection from the exchange and reports why the
// exchange was aborted, if it was.
func (x *exchange) detach() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.conn = nil
	return x.aborted
}

// staleConnError is a failure on a reused pooled connection before any byte
// of the response arrived: the request can be sent again on a fresh one.
type staleConnError struct{ error }

func (e *staleConnError) Unwrap() error { return e.error }

// responseHeaderError is an upstream response whose headers could not be
// parsed. Its message never carries the upstream's bytes (fasthttp's does).
type responseHeaderError struct{ error }

func (e *responseHeaderError) Error() string { return "the upstream sent malformed response headers" }
func (e *responseHeaderError) Unwrap() error { return e.error }

// roundTrip sends req upstream and reads the response headers into resp. The
// returned body owns resp from then on: close it, and do not release resp.
func (up *upstream) roundTrip(x *exchange, req *fasthttp.Request, resp *fasthttp.Response) (*upstreamBody, error) {
	body, err := up.send(x, req, resp, false)
	if err == nil {
		return body, nil
	}
	if stale := (*staleConnError)(nil); errors.As(err, &stale) {
		// Once more, on a fresh connection; a second failure is the upstream's.
		body, err = up.send(x, req, resp, true)
	}
	return body, err
}

// send makes one attempt. fresh asks for a newly dialled connection.
func (up *upstream) send(x *exchange, req *fasthttp.Request, resp *fasthttp.Response, fresh bool) (*upstreamBody, error) {
	hc := up.client
	for {
		cc, err := hc.AcquireConn(0, false)
		if err != nil {
			return nil, err
		}
		conn := cc.Conn()
		tc, ok := conn.(*trackedConn)
		if !ok {
			tc = up.conns.lookup(conn.LocalAddr()) // under TLS
		}
		if tc == nil {
			// Not dialled by us (cannot happen): no stale check possible.
			hc.CloseConn(cc)
			return nil, errors.New("upstream connection not tracked")
		}
		reused := tc.exchanges > 0
		if reused && (fresh || tc.peerClosed()) {
			hc.CloseConn(cc)
			continue
		}
		tc.exchanges++

		if err := x.attach(conn); err != nil {
			x.detach()
			hc.CloseConn(cc)
			return nil, err
		}
		readBefore := tc.read.Load()
		var wrote time.Time // when the request was written whole
		// fail ends the attempt; sent says that the request was written
		// whole, so the upstream may have read it.
		fail := func(err error, sent bool) error {
			hc.CloseConn(cc)
			if aborted := x.detach(); aborted != nil {
				return aborted
			}
			// A timeout is the upstream being slow, not a dead connection:
			// the request may be generating, so it is never sent again.
			// Nor is one the upstream may have read before it hung up,
			// unless a repeat is harmless (replayable), or it is an
			// inference call whose failure came so soon that the close
			// crossed it (crossedWindow): an upload, a batch, a
			// fine-tuning job or a deletion would happen twice.
			if reused && tc.read.Load() == readBefore && !isTimeout(err) &&
				(!sent || replayable(req) || x.inference && time.Since(wrote) < crossedWindow) {
				return &staleConnError{err}
			}
			return err
		}

		if d := hc.WriteTimeout; d > 0 {
			_ = conn.SetWriteDeadline(time.Now().Add(d))
		}
		if conn == net.Conn(tc) {
			err = x.writeRequest(tc.Conn, req)
		} else { // TLS
			bw := hc.AcquireWriter(conn)
			err = req.Write(bw)
			if err == nil {
				err = bw.Flush()
			}
			hc.ReleaseWriter(bw)
		}
		if err != nil {
			return nil, fail(err, false)
		}
		if reused {
			wrote = time.Now()
		}

		if d := hc.ReadTimeout; d > 0 {
			_ = conn.SetReadDeadline(time.Now().Add(d))
		}
		resp.StreamBody = true
		resp.Header.DisableNormalizing()
		// An answer without Content-Type must reach the client without
		// one: fasthttp's headers otherwise report text/plain for it.
		resp.Header.SetNoDefaultContentType(true)
		if req.Header.IsHead() {
			resp.SkipBody = true
		}
		br := hc.AcquireReader(conn)
		rd := br
		err = resp.ReadLimitBody(br, 0)
		if err != nil {
			// (Declared here: errors.As moves small to the heap.)
			var small *fasthttp.ErrSmallBuffer
			if errors.As(err, &small) {
				// Headers larger than the pooled buffer: nothing was consumed
				// (fasthttp peeks), so read them again with a larger one.
				held := append([]byte(nil), mustPeek(br)...)
				rd = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(held), conn), maxResponseHeaderBytes)
				err = resp.ReadLimitBody(rd, 0)
			}
			if err != nil {
				hc.ReleaseReader(br)
				if errors.As(err, &small) || isHeaderParseError(err) {
					err = &responseHeaderError{err}
				}
				return nil, fail(err, true)
			}
		}
		if aborted := x.detach(); aborted != nil {
			hc.ReleaseReader(br)
			hc.CloseConn(cc)
			return nil, aborted
		}
		if up.idle > 0 {
			tc.armIdle(up.idle)
		} else {
			_ = conn.SetReadDeadline(time.Time{})
		}

		b := &upstreamBody{
			resp:   resp,
			r:      resp.BodyStream(),
			conn:   tc,
			raw:    conn,
			idle:   up.idle,
			length: int64(resp.Header.ContentLength()),
			// A body that ends when the connection closes (no length, not
			// chunked) leaves nothing to reuse.
			keep: !req.ConnectionClose() && !resp.ConnectionClose() && rd == br && resp.Header.ContentLength() != -2,
			release: func(discard bool) {
				if br != nil {
					hc.ReleaseReader(br)
				}
				if discard {
					hc.CloseConn(cc)
				} else {
					hc.ReleaseConn(cc)
				}
			},
		}
		if b.r == nil {
			b.eof = true // no body: HEAD, 204, 304
		} else if b.length == -1 && rd == br {
			// An SSE stream holds its reader for its whole life: a chunked
			// body gets a small one, and the pooled one goes back now.
			b.r = newChunkedBody(br, conn)
			hc.ReleaseReader(br)
			br = nil
		} else if b.length == -1 {
			b.r = &chunkedBody{br: rd}
		}
		return b, nil
	}
}

// crossedWindow is how soon after a request was written a close or a reset
// with no answer is taken to have crossed it on the wire: the upstream
// closed the idle connection at its keep-alive timeout as the request
// arrived, and never read it (a reset is the kernel's answer to data for a
// closed socket). It is measured when loopguard's goroutine sees the
// failure, which a busy machine delays by tens of milliseconds; an upstream
// that read a request, began work on it and then failed does so later. One
// that reads a request and resets at once cannot be told apart from a
// crossed close, and gets it again: only an inference call on a guarded
// API is (exchange.inference), whose repeat costs tokens and nothing else;
// any other request that may have been read is answered 502. Crossed
// closes are rare in the first place: pooled connections idle for
// upstream.max_idle_conn_duration (4 s, under the 5 s keep-alive of
// uvicorn, Node and vLLM) are retired, and one the upstream closed is
// seen closed at checkout (trackedConn.peerClosed).
const crossedWindow = 100 * time.Millisecond

// replayable reports a request that may be sent twice without harm, as Go's
// net/http decides: a safe method (RFC 9110 section 9.2.1: GET, HEAD,
// OPTIONS, TRACE), or one that carries an idempotency key, with which the
// server itself drops a repeat.
func replayable(req *fasthttp.Request) bool {
	h := &req.Header
	switch {
	case h.IsGet(), h.IsHead(), h.IsOptions(), h.IsTrace():
		return true
	}
	return len(h.Peek("Idempotency-Key")) > 0 || len(h.Peek("X-Idempotency-Key")) > 0
}

func mustPeek(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// isHeaderParseError tells fasthttp's "cannot parse" errors from network
// ones; only the former carry the upstream's raw bytes in their message.
func isHeaderParseError(err error) bool {
	var ne net.Error
	return !errors.As(err, &ne) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) &&
		!errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, fasthttp.ErrTimeout)
}

// upstreamBody is one upstream response's body. It owns the response, the
// pooled connection and its reader until Close, which every way a response
// can end (its last byte, the client leaving, a cut, the request deadline)
// goes through exactly once. Close may run while another goroutine is inside
// Read: it interrupts the read by closing the connection and waits for it,
// so nothing is released under a running read.
type upstreamBody struct {
	resp *fasthttp.Response
	r    io.Reader // fasthttp's body stream, or a chunkedBody
	conn *trackedConn
	raw  net.Conn // what the pool holds; closing it interrupts a Read
	idle time.Duration
	// length is the declared body length, or negative (chunked, until close).
	length int64
	// keep: the connection may serve another request once this body has
	// been read to its end.
	keep    bool
	release func(discard bool)

	mu  sync.Mutex // held by Read
	eof bool
	// pumped: Read is called within pump's step, on the goroutine that
	// pumps; it never waits.
	pumped bool
	n      int64
	closed atomic.Bool
	once   sync.Once
}

// Read reads the body, starting the idle timeout anew (trackedConn) and
// turning a missed deadline into errIdle.
func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, io.ErrClosedPipe
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return 0, io.ErrClosedPipe
	}
	if b.eof {
		return 0, io.EOF
	}
	if b.idle > 0 && !b.pumped {
		b.conn.waitFrom = time.Now()
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	switch {
	case err == rawsock.ErrWouldBlock:
		err = sse.ErrWouldBlock
	case errors.Is(err, io.EOF):
		b.eof = true
		err = io.EOF
	case err == nil && b.length >= 0 && b.n >= b.length:
		// All of a known length is here: a reader that stops at the length
		// (fasthttp writing a sized body) never sees the EOF.
		b.eof = true
		err = io.EOF
	case err != nil && isTimeout(err):
		err = errIdle
	}
	return n, err
}

// Ready reports whether a Read returns bytes at once, without waiting on
// the connection (sse.Readier): the rest of a chunked body's current chunk,
// or its next chunk, is buffered already.
func (b *upstreamBody) Ready() bool {
	if b.closed.Load() || !b.mu.TryLock() {
		return false
	}
	defer b.mu.Unlock()
	cb, ok := b.r.(*chunkedBody)
	return ok && !b.closed.Load() && !b.eof && cb.ready()
}

// interrupt ends the body's reads from any goroutine, at once: the
// upstream sees its connection end, so the model stops, and a Read that
// waits, or the next one, fails. It never waits for the reader, who may be
// busy elsewhere (writing to a client that does not read): the reader's
// own Close, which must follow, releases the body.
func (b *upstreamBody) interrupt() {
	b.closed.Store(true)
	b.conn.shutdown()
}

// ContentLength is the body's declared length: -1 chunked, -2 until close.
func (b *upstreamBody) ContentLength() int64 { return b.length }

// Close ends the body. A nil cause after the body was read to its end
// returns the connection to the pool; anything else closes it, which is what
// makes vLLM and llama.cpp stop generating (docs/streams.md: releasing a cut
// connection).
func (b *upstreamBody) Close(cause error) {
	b.once.Do(func() {
		b.closed.Store(true)
		locked := b.mu.TryLock()
		discard := cause != nil || !locked || !b.eof || !b.keep || b.resp.ConnectionClose()
		if discard {
			_ = b.raw.Close()
		}
		if !locked {
			b.mu.Lock() // the close above ends the running Read
		}
		if !discard && b.idle > 0 {
			b.conn.disarmIdle()
		}
		b.release(discard)
		fasthttp.ReleaseResponse(b.resp)
		b.mu.Unlock()
	})
}

// writeRequest writes req, whose body is in memory, to a plain TCP
// connection as req.Write does, in one system call: header and body in one
// writev (a raw one: rawsock). Through a buffer the size of the client's, a
// body larger than it goes out in two writes, the buffer's worth and the
// rest.
func (x *exchange) writeRequest(conn net.Conn, req *fasthttp.Request) error {
	body := req.Body()
	if len(body) != 0 || !req.Header.IsGet() && !req.Header.IsHead() {
		req.Header.SetContentLength(len(body))
	}
	x.iov = [2][]byte{req.Header.Header(), body}
	x.out = x.iov[:]
	_, err := rawsock.WriteBuffers(conn, &x.out)
	x.iov, x.out = [2][]byte{}, nil // the pool must not keep the body
	return err
}

// peerClosed reports, without blocking, whether an idle pooled connection
// was closed by the upstream (FIN or RST) or has bytes nobody asked for.
// Either way it must not carry another request. Only the goroutine holding
// the connection from the pool calls it.
func (c *trackedConn) peerClosed() bool {
	if c.raw == nil {
		return false
	}
	c.dead = false
	if err := c.raw.Control(c.peek); err != nil {
		return true // the socket is closed already
	}
	return c.dead
}
