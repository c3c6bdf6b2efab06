package proxy

import (
	"sync/atomic"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// bodyBudget bounds the memory that request bodies being read or held take
// together (server.max_body_memory). Each body is held whole, up to
// server.max_body_bytes, so that the pipeline can inspect and rewrite it;
// without an overall bound, a handful of concurrent maximal bodies take
// the process's memory. A request's share is reserved when its headers
// arrive, before fasthttp reads the body: its Content-Length, or the body
// limit for a chunked one. A request that does not fit is answered 503
// with Retry-After, unread. The share is kept by the client's connection
// (clientConn.reserved) and given back when the handler returns, when the
// body's read fails, when the next request on the connection begins, or
// when the connection closes, whichever comes first: a client that leaves
// mid-body ends no handler and may get no error handler either.
type bodyBudget struct {
	limit int64 // 0: no bound
	used  atomic.Int64
}

// reserve takes n bytes of the budget; false when they do not fit. A body
// alone is always let in, however large: the budget then bounds memory to
// it, and no request waits for ever.
func (b *bodyBudget) reserve(n int64) bool {
	if b == nil || b.limit <= 0 || n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit && u != 0 {
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

// giveBack returns what c holds of its budget.
func (c *clientConn) giveBack() {
	if c.budget != nil {
		c.budget.release(c.reserved.Swap(0))
	}
}

// ctxLayout is never used but for the offsets of its fields.
var ctxLayout fasthttp.RequestCtx

// requestHeaderOffset is where a RequestCtx holds its request's header.
const requestHeaderOffset = unsafe.Offsetof(ctxLayout.Request) + unsafe.Offsetof(ctxLayout.Request.Header)

// ctxOfHeader returns the RequestCtx whose request header h is. fasthttp's
// HeaderReceived hook is given &ctx.Request.Header alone (fasthttp v1.74,
// which go.mod pins; TestBodyMemoryBudget fails if that changes), and the
// budget is kept by the connection, which only the ctx knows.
func ctxOfHeader(h *fasthttp.RequestHeader) *fasthttp.RequestCtx {
	return (*fasthttp.RequestCtx)(unsafe.Add(unsafe.Pointer(h), -int(requestHeaderOffset)))
}

// headerReceived is the Server's fasthttp HeaderReceived: it reserves the
// request body's share for the connection, or refuses it, which fails the
// body's read at once (handleServerError answers).
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if s.bodies.limit <= 0 {
		return fasthttp.RequestConfig{}
	}
	cc, ok := ctxOfHeader(h).Conn().(*clientConn)
	if !ok {
		return fasthttp.RequestConfig{}
	}
	cc.giveBack() // the connection's previous request is over
	cc.refused = false
	n := int64(h.ContentLength())
	switch {
	case n == -1: // chunked: as much as it may grow to
		n = int64(s.cfg.Server.MaxBodyBytes)
	case n <= 0 || n > int64(s.cfg.Server.MaxBodyBytes):
		return fasthttp.RequestConfig{} // nothing to hold, or refused as too large
	}
	if !s.bodies.reserve(n) {
		cc.refused = true
		// The smallest limit fasthttp takes: the body's read fails at once.
		return fasthttp.RequestConfig{MaxRequestBodySize: 1}
	}
	cc.reserved.Store(n)
	return fasthttp.RequestConfig{}
}
