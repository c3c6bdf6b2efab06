package proxy

import (
	"errors"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// bodyBudget bounds the memory that request bodies take together
// (server.max_body_memory): the bytes of a body as they arrive, and the
// bytes its decoding produces as they are produced. A body is held whole,
// up to server.max_body_bytes, so that the pipeline can inspect and
// rewrite it; without an overall bound, a handful of concurrent maximal
// bodies, or small bodies that inflate to maximal ones, take the process's
// memory. Nothing is reserved for a size a header declares: a client that
// declares 64 MiB and sends a byte a second holds a byte a second.
//
// A client connection holds its share (clientConn.take) and gives it back
// when its request's handler returns, when the body's read fails, when the
// next request on the connection begins, or when the connection closes,
// whichever comes first: a client that leaves mid-body ends no handler and
// may get no error handler either. A body whose next bytes do not fit is
// refused 503 with Retry-After (handleServerError); a decoding that would
// pass what is left stops there, answered the same (decodeRequest).
type bodyBudget struct {
	limit int64 // 0: no bound
	used  atomic.Int64
}

// reserve takes n bytes for a holder that holds held bytes of the budget
// already; false when they do not fit. What one holder takes alone is
// always let in: the budget then bounds memory to one body, which
// server.max_body_bytes bounds, and no request waits for ever.
func (b *bodyBudget) reserve(n, held int64) bool {
	if b == nil || b.limit <= 0 || n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit && u != held {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *bodyBudget) release(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// errBodyMemory: the bytes a body, its decoding or a socket's message
// would hold next do not fit in server.max_body_memory.
var errBodyMemory = errors.New("proxy: request bodies in flight hold server.max_body_memory")

// budgetShare is one holder's part of a bodyBudget: a client connection's
// request body, or a WebSocket's message. Its methods are safe for
// concurrent use: the connection's Close may give the share back while
// the request still takes from it.
type budgetShare struct {
	budget   *bodyBudget
	mu       sync.Mutex
	reserved int64
}

// take adds n bytes to the share; false, taking nothing, when they do not
// fit.
func (s *budgetShare) take(n int64) bool {
	if s == nil || s.budget == nil || s.budget.limit <= 0 || n <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.budget.reserve(n, s.reserved) {
		return false
	}
	s.reserved += n
	return true
}

// drop gives back n bytes of the share, a buffer let go before the
// request ends.
func (s *budgetShare) drop(n int64) {
	if s == nil || s.budget == nil || n <= 0 {
		return
	}
	s.mu.Lock()
	n = min(n, s.reserved)
	s.reserved -= n
	s.mu.Unlock()
	s.budget.release(n)
}

// giveBack returns the whole share.
func (s *budgetShare) giveBack() {
	if s == nil || s.budget == nil {
		return
	}
	s.mu.Lock()
	n := s.reserved
	s.reserved = 0
	s.mu.Unlock()
	s.budget.release(n)
}

// largeBuffer is the size from which a buffer let go asks for its memory
// to go back to the system (returnMemory).
const largeBuffer = 16 << 20

// returnMemory has the collector free what large buffers let go of and
// give it back to the system soon, at most once every returnEvery: an idle
// process allocates nothing, so its collector would not run for minutes,
// and what one large message or body took would stay resident until then.
func returnMemory() {
	memoryReturn.mu.Lock()
	defer memoryReturn.mu.Unlock()
	if memoryReturn.pending {
		return
	}
	memoryReturn.pending = true
	wait := max(0, returnEvery-time.Since(memoryReturn.last))
	time.AfterFunc(wait, func() {
		debug.FreeOSMemory()
		memoryReturn.mu.Lock()
		memoryReturn.pending, memoryReturn.last = false, time.Now()
		memoryReturn.mu.Unlock()
	})
}

const returnEvery = 2 * time.Second

var memoryReturn struct {
	mu      sync.Mutex
	pending bool
	last    time.Time
}

// bodyPace is how slowly a request body may arrive, as nginx's
// client_body_timeout and Apache's mod_reqtimeout MinRate:
// server.body_timeout bounds each wait for the body's next bytes, and a
// body must have come at server.min_body_rate on average once that first
// timeout has passed. A client that trickles a byte a second holds a
// connection, a goroutine and its few bytes for body_timeout, never for
// the whole server.read_timeout.
type bodyPace struct {
	timeout time.Duration // 0: no bound of its own
	rate    int64         // bytes per second; 0: none
}

// bodyRead is the state of the body a client connection is reading; it is
// touched by the connection's serving goroutine only (headerReceived,
// Read, handle).
type bodyRead struct {
	reading  bool
	start    time.Time
	received int64
	// deadline is the read deadline fasthttp set last (server.read_timeout),
	// which a body's own bound never extends, in Unix nanoseconds (0:
	// none). Atomic: a hijacked socket's goroutines set deadlines too.
	deadline atomic.Int64
}

// deadline is when the body's next read must have returned.
func (p bodyPace) deadline(r *bodyRead, now time.Time) time.Time {
	var d time.Time
	if ns := r.deadline.Load(); ns != 0 {
		d = time.Unix(0, ns)
	}
	earlier := func(t time.Time) {
		if d.IsZero() || t.Before(d) {
			d = t
		}
	}
	if p.timeout > 0 {
		earlier(now.Add(p.timeout))
		if p.rate > 0 {
			earlier(r.start.Add(p.timeout + time.Duration(float64(r.received)/float64(p.rate)*float64(time.Second))))
		}
	}
	return d
}

// Read reads the client's bytes; those of a request body are taken from
// the budget as they arrive, and each read waits no longer than the body's
// pace allows.
func (c *clientConn) Read(p []byte) (int, error) {
	if !c.body.reading {
		return c.readSocket(p)
	}
	if err := c.Conn.SetReadDeadline(c.pace.deadline(&c.body, time.Now())); err != nil {
		return 0, err
	}
	n, err := c.readSocket(p)
	if n > 0 {
		c.body.received += int64(n)
		if !c.share.take(int64(n)) {
			c.refused = true
			return 0, errBodyMemory
		}
	}
	return n, err
}

// SetReadDeadline is fasthttp's deadline for the request (or the idle
// wait), which a body's reads keep to.
func (c *clientConn) SetReadDeadline(t time.Time) error {
	if c.idleNext > 0 && !t.IsZero() {
		t, c.idleNext = time.Now().Add(c.idleNext), 0
	}
	c.body.setDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *clientConn) SetDeadline(t time.Time) error {
	c.body.setDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (r *bodyRead) setDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	r.deadline.Store(ns)
}

// beginBody starts counting a request body's bytes.
func (c *clientConn) beginBody(now time.Time) {
	c.body.reading, c.body.start, c.body.received = true, now, 0
}

// endBody stops counting: the body is read, or its read failed. The
// request keeps its share until it ends (giveBack).
func (c *clientConn) endBody() { c.body.reading = false }

// lingerFor and lingerBytes bound how long, and how much, a connection
// that refused a body it had not read reads and discards after its answer,
// as nginx's lingering_close: closing with the body's bytes unread would
// make the kernel reset the connection, and the client would see the reset
// instead of the answer.
const (
	lingerFor   = 2 * time.Second
	lingerBytes = 4 << 20
)

// linger half-closes c's socket, so the client reads the answer and an
// end, and discards what the client still sends until it stops, or for
// lingerFor or lingerBytes at most.
func linger(tc *net.TCPConn) {
	if tc.CloseWrite() != nil {
		return
	}
	_ = tc.SetReadDeadline(time.Now().Add(lingerFor))
	buf := lingerBufs.Get().(*[4 << 10]byte)
	defer lingerBufs.Put(buf)
	for n := 0; n < lingerBytes; {
		m, err := tc.Read(buf[:])
		n += m
		if err != nil {
			return
		}
	}
}

var lingerBufs = sync.Pool{New: func() any { return new([4 << 10]byte) }}

// ctxLayout is never used but for the offsets of its fields.
var ctxLayout fasthttp.RequestCtx

// requestHeaderOffset is where a RequestCtx holds its request's header.
const requestHeaderOffset = unsafe.Offsetof(ctxLayout.Request) + unsafe.Offsetof(ctxLayout.Request.Header)

// ctxOfHeader returns the RequestCtx whose request header h is. fasthttp's
// HeaderReceived hook is given &ctx.Request.Header alone (fasthttp v1.74,
// which go.mod pins; TestBodyMemoryBudget fails if that changes), and the
// body's state is kept by the connection, which only the ctx knows.
func ctxOfHeader(h *fasthttp.RequestHeader) *fasthttp.RequestCtx {
	return (*fasthttp.RequestCtx)(unsafe.Add(unsafe.Pointer(h), -int(requestHeaderOffset)))
}

// headerReceived is the Server's fasthttp HeaderReceived: the connection's
// previous request is over, and the body that follows, if any, is counted
// and paced from here on.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	cc, ok := ctxOfHeader(h).Conn().(*clientConn)
	if !ok {
		return fasthttp.RequestConfig{}
	}
	cc.share.giveBack()
	cc.refused = false
	if n := h.ContentLength(); n > 0 && n <= s.cfg.Server.MaxBodyBytes || n == -1 {
		cc.beginBody(time.Now())
	}
	return fasthttp.RequestConfig{}
}

// heldBy is the budget share of ctx's connection; nil (no bound) for a
// request that did not come through the Server's listener.
func heldBy(ctx *fasthttp.RequestCtx) *budgetShare {
	if cc, ok := ctx.Conn().(*clientConn); ok {
		return &cc.share
	}
	return nil
}
