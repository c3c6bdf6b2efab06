package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/loopguard/loopguard/internal/hotlines"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/ndjson"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// responseObserver sees an upstream response as it passes. answerObserver
// implements it; plain pass-through uses none. The proxy calls it through
// the recovers of failsafe.go: a panic in it costs the client no byte.
type responseObserver interface {
	// header is called once with the upstream's status before anything is
	// written, so the observer can add response headers.
	header(status int, h *fasthttp.ResponseHeader)
	// event handles one SSE event after the previous ones were flushed: it
	// appends to out what the client should see now (normally ev.Raw) and
	// returns it. stop ends the stream and closes the upstream connection.
	event(ev *sse.Event, out []byte) (_ []byte, stop bool)
	// end is called once when a stream that event did not stop is over
	// (the upstream finished, failed or went idle, or the rest is passed
	// through unparsed), before anything loopguard adds: it appends what the
	// observer still holds back.
	end(out []byte) []byte
	// body sees a complete non-streamed body and returns what the client
	// gets, nil to keep the upstream's. decoded: b is the answer with the
	// content coding the upstream applied undone, and what body returns is
	// coded again by the caller.
	body(status int, b []byte, decoded bool) []byte
	// warm is called when the upstream's socket became readable, before the
	// read: it loads what the observer's next event reads, so that those
	// cache misses are in flight with the relay's own (docs/streams.md).
	warm()
	// abandon is called when one of the observer's calls panicked: its
	// state cannot be trusted, so it must not be reused. finish still follows.
	abandon()
	// finish is called once when the response is over, with why it ended
	// (nil: the upstream finished); it completes info with what it knows
	// (session, cut) before the response is logged and counted.
	finish(cause error, info *observe.ResponseInfo)
}

// hopByHop are the headers that describe one connection, not the message,
// and must not be forwarded by a proxy (RFC 9110 section 7.6.1).
var hopByHop = [...]string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "TE", "Trailer", "Transfer-Encoding", "Upgrade",
}

func isHopByHop(k []byte, connTokens []byte) bool {
	for _, h := range hopByHop {
		if asciiEqualFold(k, h) {
			return true
		}
	}
	// Headers named in Connection are hop-by-hop too.
	for len(connTokens) > 0 {
		var tok []byte
		tok, connTokens, _ = bytes.Cut(connTokens, []byte{','})
		if asciiEqualFold(bytes.TrimSpace(tok), string(k)) {
			return true
		}
	}
	return false
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// copyBufs are the buffers of body copies (io.Copy would allocate 32 KiB
// for each response).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// bufferLimit is the largest non-streamed body read whole before answering
// on a path loopguard does not inspect; larger ones stream through.
const bufferLimit = 1 << 20

// inspectLimit is the largest non-streamed answer loopguard reads whole to
// inspect it; a larger one streams through uninspected, so one huge answer
// cannot take the process's memory with it.
const inspectLimit = 8 << 20

// forward sends the client's request upstream with body as its body and
// relays the answer. obs, when not nil, watches the response.
func (s *Server) forward(ctx *fasthttp.RequestCtx, body []byte, obs responseObserver) {
	start := time.Now()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	up := s.upstreamFor(ctx)
	s.buildUpstreamRequest(ctx, req, up, body, obs != nil)

	// A client that leaves while the upstream prepares its answer (prompt
	// processing, a whole non-streamed generation) closes the upstream
	// connection, so the model stops. Only requests that can start a
	// generation are watched: the watch costs two system calls.
	x := acquireExchange()
	var watch *peerWatch
	if !ctx.IsGet() && !ctx.IsHead() {
		watch = s.peers.watch(ctx.Conn(), x.clientGone)
	}
	resp := fasthttp.AcquireResponse()
	ub, err := up.roundTrip(x, req, resp)
	watch.stop()
	releaseExchange(x) // the watch is over and the round trip let go of it
	headerLatency := time.Since(start)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		status := statusClientClosed
		if errors.Is(err, errClientGone) {
			// The client left (or half-closed) before the answer came: nobody
			// reads an answer, and the upstream did not fail. nginx logs 499
			// and sends nothing; so does loopguard.
			ctx.HijackSetNoResponse(true)
			ctx.Hijack(func(net.Conn) {})
		} else {
			var code string
			status, code = upstreamErrorStatus(err)
			writeError(ctx, status, "loopguard: upstream request failed: "+errorReason(err), "upstream_error", code)
		}
		s.respond(obs, ctx.Method(), ctx.Path(), err, observe.ResponseInfo{
			Status: status, UpstreamLatency: headerLatency, Duration: time.Since(start)})
		return
	}

	status := resp.StatusCode()
	if status == fasthttp.StatusSwitchingProtocols {
		// loopguard never asks for a protocol switch (Upgrade is
		// hop-by-hop and dropped): an upstream's 101 cannot be relayed, as
		// nginx refuses it too.
		ub.Close(errUnsolicitedUpgrade)
		writeError(ctx, fasthttp.StatusBadGateway, "loopguard: the upstream switched protocols unasked", "upstream_error", "upstream_error")
		ctx.SetConnectionClose()
		s.respond(obs, ctx.Method(), ctx.Path(), errUnsolicitedUpgrade, observe.ResponseInfo{
			Status: fasthttp.StatusBadGateway, UpstreamLatency: headerLatency, Duration: time.Since(start)})
		return
	}
	ctx.Response.Header.DisableNormalizing()
	copyResponseHeader(&ctx.Response.Header, &resp.Header)
	ctx.SetStatusCode(status)
	if msg := resp.Header.StatusMessage(); len(msg) > 0 {
		ctx.Response.Header.SetStatusMessage(msg)
	}

	if isEventStream(resp.Header.ContentType()) {
		s.relayStream(ctx, ub, obs, start, headerLatency, false)
		return
	}
	if obs != nil && isNDJSON(resp.Header.ContentType()) {
		// A guarded NDJSON answer (Ollama's) is relayed and watched line
		// by line as SSE is; unguarded ones pass through below.
		s.relayStream(ctx, ub, obs, start, headerLatency, true)
		return
	}
	observed := obs != nil && s.observeHeader(obs, status, &ctx.Response.Header)

	limit := int64(bufferLimit)
	if obs != nil {
		limit = inspectLimit
	}
	n := ub.ContentLength()
	if n > limit || obs == nil && n < 0 {
		// Unknown or large length: stream it through without holding it.
		s.passThrough(ctx, ub, nil, n, obs, start, headerLatency)
		return
	}
	// A body of known length ends there (upstreamBody stops at it); only
	// a chunked one needs the limit.
	var src io.Reader = ub
	if n < 0 {
		src = io.LimitReader(ub, limit+1)
	}
	bw := ctx.Response.BodyWriter()
	buf := copyBufs.Get().(*[]byte)
	written, err := io.CopyBuffer(bw, src, *buf)
	copyBufs.Put(buf)
	if err == nil && written > limit {
		// A chunked answer larger than what is inspected: what was read
		// goes first, the rest streams through.
		held := append([]byte(nil), ctx.Response.Body()...)
		ctx.Response.ResetBody()
		s.passThrough(ctx, ub, held, -1, obs, start, headerLatency)
		return
	}
	ub.Close(err)
	if err != nil {
		// The status line is not sent yet: answer with an error instead of a
		// truncated body.
		ctx.Response.ResetBody()
		status, code := upstreamErrorStatus(err)
		writeError(ctx, status, "loopguard: reading the upstream response failed: "+errorReason(err), "upstream_error", code)
	} else if observed {
		s.observeStoredBody(ctx, obs, status)
	}
	s.respond(obs, ctx.Method(), ctx.Path(), err, observe.ResponseInfo{Status: ctx.Response.StatusCode(),
		UpstreamLatency: headerLatency, Duration: time.Since(start), Bytes: written})
}

// observeStoredBody shows obs the whole non-streamed answer in ctx and
// puts what obs makes of it in its place. An answer the upstream coded
// although loopguard asked for identity (gateways that compress whatever
// Accept-Encoding says) is shown decoded; the client still gets the
// upstream's bytes and headers, unless obs changes the answer, which is
// then coded the same way. One that does not decode passes as sent.
func (s *Server) observeStoredBody(ctx *fasthttp.RequestCtx, obs responseObserver, status int) {
	body := ctx.Response.Body()
	ce := ctx.Response.Header.ContentEncoding()
	cs, err := parseCodings(ce)
	if err == nil && cs.empty() {
		if b := s.observeBody(obs, status, body, false); b != nil {
			ctx.Response.SetBodyRaw(b)
		}
		return
	}
	var decoded []byte
	if err == nil {
		decoded, err = cs.decode(nil, body, inspectLimit)
	}
	if err != nil {
		s.log.Warn().Bytes("content_encoding", ce).AnErr("error", err).
			Msg("answer cannot be decoded for inspection; passed through unchanged")
		return
	}
	if b := s.observeBody(obs, status, decoded, true); b != nil {
		ctx.Response.SetBody(cs.encode(nil, b))
	}
}

// passThrough relays a non-streamed body without holding it: head (bytes
// already read) first, then the rest of ub. n is the body's length, or -1.
func (s *Server) passThrough(ctx *fasthttp.RequestCtx, ub *upstreamBody, head []byte, n int64, obs responseObserver, start time.Time, headerLatency time.Duration) {
	status := ctx.Response.StatusCode()
	method, path := append([]byte(nil), ctx.Method()...), append([]byte(nil), ctx.Path()...)
	var r io.Reader = ub
	if len(head) > 0 {
		r = io.MultiReader(bytes.NewReader(head), ub)
	}
	pb := &passBody{r: r, body: ub, done: func(n int64, err error) {
		s.respond(obs, method, path, err, observe.ResponseInfo{Status: status, UpstreamLatency: headerLatency,
			Duration: time.Since(start), Bytes: n})
	}}
	if n < 0 && !ctx.Request.Header.IsHTTP11() {
		// No length to send, and HTTP/1.0 has no chunked coding: the body
		// ends with the connection.
		s.setStreamWriter(ctx, func(w *bufio.Writer) {
			_, err := io.Copy(w, pb) // bufio's ReadFrom
			if err == nil {
				err = w.Flush()
			}
			_ = pb.CloseWithError(err)
		})
		return
	}
	ctx.Response.SetBodyStream(pb, int(n))
}

// buildUpstreamRequest copies the client's request into req: method, path
// joined onto up's base, query, end-to-end headers.
func (s *Server) buildUpstreamRequest(ctx *fasthttp.RequestCtx, req *fasthttp.Request, up *upstream, body []byte, inspected bool) {
	in := &ctx.Request
	req.Header.DisableNormalizing()
	req.Header.SetNoDefaultContentType(true)
	req.Header.SetMethodBytes(in.Header.Method())

	// PathOriginal, not Path: the upstream gets the path exactly as the
	// client wrote it, without fasthttp's normalising. The URI is built on
	// the stack (SetRequestURIBytes copies it): a released request's empty
	// URI is fasthttp's constant "/", and appending to it would allocate.
	var uriBuf [256]byte
	uri := up.path(uriBuf[:0], ctx.URI().PathOriginal())
	if q := ctx.URI().QueryString(); len(q) > 0 {
		uri = append(uri, '?')
		uri = append(uri, q...)
	}
	req.SetRequestURIBytes(uri)
	req.Header.SetHost(up.host)

	conn := in.Header.Peek("Connection")
	for k, v := range in.Header.All() {
		switch {
		case isHopByHop(k, conn), asciiEqualFold(k, "Host"), asciiEqualFold(k, "Content-Length"):
			continue
		case s.cfg.Upstream.APIKey != "" && asciiEqualFold(k, "Authorization"):
			continue
		case inspected && asciiEqualFold(k, "Accept-Encoding"):
			// We parse what comes back, which identity keeps cheap; an
			// upstream that compresses anyway is decoded (docs/streams.md:
			// compression).
			continue
		}
		req.Header.AddBytesKV(k, v)
	}
	if s.cfg.Upstream.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.cfg.Upstream.APIKey)
	}
	if inspected {
		req.Header.Set("Accept-Encoding", "identity")
	}
	if len(body) > 0 || in.Header.ContentLength() >= 0 && !in.Header.IsGet() && !in.Header.IsHead() {
		req.SetBodyRaw(body)
	}
}

func copyResponseHeader(dst, src *fasthttp.ResponseHeader) {
	conn := src.Peek("Connection")
	for k, v := range src.All() {
		switch {
		case isHopByHop(k, conn) || asciiEqualFold(k, "Content-Length"):
			// Not forwarded: they describe the upstream connection and its framing.
		case asciiEqualFold(k, "Date"):
			addDate(dst, k, v)
		default:
			dst.AddBytesKV(k, v)
		}
	}
}

// addDate adds the upstream's Date header line to dst. fasthttp's header
// setters drop Date, which its server writes from its own clock; loopguard's
// server writes none (NoDefaultDate) so that the upstream's goes on. Only
// parsing stores a Date, and reading a trailer appends its lines to the
// headers as they are, so the line is read in as one.
func addDate(dst *fasthttp.ResponseHeader, k, v []byte) {
	d := dateLines.Get().(*dateLine)
	d.line = append(append(append(append(d.line[:0], k...), ": "...), v...), "\r\n\r\n"...)
	d.r.Reset(d.line)
	if d.br.Size() < len(d.line) {
		// ReadTrailer needs the whole line in the buffer.
		d.br = bufio.NewReaderSize(&d.r, len(d.line))
	}
	d.br.Reset(&d.r)
	_ = dst.ReadTrailer(d.br)
	dateLines.Put(d)
}

// dateLine is addDate's line and the readers over it, reused: every
// answer carries a Date.
type dateLine struct {
	line []byte
	r    bytes.Reader
	br   *bufio.Reader
}

var dateLines = sync.Pool{New: func() any {
	d := &dateLine{}
	d.br = bufio.NewReaderSize(&d.r, 64) // "Date: Tue, 24 Nov 2026 05:17:03 GMT" and its end
	return d
}}

func isEventStream(ct []byte) bool {
	ct, _, _ = bytes.Cut(ct, []byte{';'})
	return asciiEqualFold(bytes.TrimSpace(ct), "text/event-stream")
}

func isNDJSON(ct []byte) bool {
	ct, _, _ = bytes.Cut(ct, []byte{';'})
	ct = bytes.TrimSpace(ct)
	return asciiEqualFold(ct, "application/x-ndjson") || asciiEqualFold(ct, "application/ndjson")
}

// relayStream forwards an SSE response event by event, or with lines an
// NDJSON one line by line, flushing after each, and owns resp until the
// stream ends.
func (s *Server) relayStream(ctx *fasthttp.RequestCtx, ub *upstreamBody, obs responseObserver, start time.Time, headerLatency time.Duration, lines bool) {
	status := ctx.Response.StatusCode()
	// nginx and similar proxies in front of us must not buffer the stream
	// (docs/streams.md: buffering).
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
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
	// An event stream the upstream coded with one coding loopguard reads is
	// inspected decoded (relayCoded); a list of codings, or coded NDJSON,
	// passes uninspected.
	var coded coding
	if _, ok := obs.(codedObserver); ok && observed && !lines {
		if cs, err := parseCodings(ctx.Response.Header.ContentEncoding()); err == nil && cs.n == 1 {
			coded = cs.list[0]
		}
	}
	st := &openStream{
		s: s, ub: ub, conn: ctx.Conn(), status: status, start: start, headerLatency: headerLatency,
		method: append([]byte(nil), ctx.Method()...), path: append([]byte(nil), ctx.Path()...),
		// A coded stream's observer holds nothing back: nothing is left
		// to end.
		rl:    streamRelay{s: s, obs: obs, raw: dropped, ended: dropped || coded != 0},
		coded: coded,
	}
	if lines {
		st.rl.nd = ndjson.NewReader(ub, s.cfg.Stream.MaxEventBytes)
	} else {
		st.rl.rd = sse.NewReader(ub, s.cfg.Stream.MaxEventBytes)
	}
	if d := s.cfg.Upstream.RequestTimeout; d > 0 {
		st.timer = time.AfterFunc(d-time.Since(start), func() { st.abort(errDeadline) })
	}
	s.obs.StreamOpened()
	st.body = s.setStreamWriter(ctx, st.relay)
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
	body  *streamBody // nil for HTTP/1.0, which writes no chunks
	// coded is the upstream's content coding of a stream inspected
	// decoded (relayCoded); 0 for the others.
	coded coding
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
	if st.coded != 0 {
		stop = st.relayCoded(w, newCodedStream(st.coded, st.rl.obs.(codedObserver), st.s.cfg.Stream.MaxEventBytes))
	} else {
		st.listLines(w)
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
	if readErr != nil && (c == nil || *c == errDeadline) && st.coded == 0 {
		// The upstream failed mid-stream: tell the client in-band, the
		// only way left once the status line is sent (docs/streams.md:
		// errors inside a 200 stream). A coded stream cannot take plain
		// bytes: its client sees the coded stream end unfinished.
		reason := readErr
		if c != nil {
			reason = *c
		}
		if st.rl.nd != nil {
			_, _ = w.Write(ndjsonErrorLine(reason))
		} else {
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
	st.s.respond(st.rl.obs, st.method, st.path, final, observe.ResponseInfo{Status: st.status, Streamed: true,
		UpstreamLatency: st.headerLatency, TTFB: st.stats.ttfb, Duration: time.Since(st.start), Events: st.stats.events, Bytes: written})
}

// lineAdder is a socket that lists its own hot lines: rawsock.Conn.
type lineAdder interface {
	AddLines(l *hotlines.List)
}

// listLines lists in st.rl.hot the lines of st's objects that relaying an
// event reads (package hotlines): all of them are made by the time the
// stream's writer runs, and live as long as the stream.
func (st *openStream) listLines(w *bufio.Writer) {
	h := &st.rl.hot
	h.Add(unsafe.Pointer(&st.rl), unsafe.Sizeof(st.rl))
	h.Add(unsafe.Pointer(&st.rl.step), unsafe.Sizeof(st.rl.step))
	h.Add(unsafe.Pointer(&st.stats), unsafe.Sizeof(st.stats))
	h.Add(unsafe.Pointer(w), unsafe.Sizeof(*w))
	if st.body != nil {
		h.Add(unsafe.Pointer(st.body), unsafe.Sizeof(*st.body))
	}
	if cc, ok := st.conn.(*clientConn); ok {
		if l, ok := cc.Conn.(lineAdder); ok {
			l.AddLines(h)
		}
	}
	ub := st.ub
	h.Add(unsafe.Pointer(ub), unsafe.Sizeof(*ub))
	h.Add(unsafe.Pointer(ub.conn), unsafe.Sizeof(*ub.conn))
	if l, ok := ub.conn.Conn.(lineAdder); ok {
		l.AddLines(h)
	}
	if cb, ok := ub.r.(*chunkedBody); ok {
		h.Add(unsafe.Pointer(cb), unsafe.Sizeof(*cb))
		if cb.own != nil {
			h.Add(unsafe.Pointer(cb.own), unsafe.Sizeof(*cb.own))
		}
	}
	if st.rl.rd != nil {
		h.Add(unsafe.Pointer(st.rl.rd), unsafe.Sizeof(*st.rl.rd))
	}
	if o, ok := st.rl.obs.(*answerObserver); ok {
		h.Add(unsafe.Pointer(o), observerHotBytes)
		if a, ok := o.answer.(*chatStream); ok {
			h.Add(unsafe.Pointer(a), unsafe.Sizeof(*a))
		}
	}
}

// listDetector adds the lines of the observer's text detector to r.hot
// once it exists.
func (r *streamRelay) listDetector() {
	o, ok := r.obs.(*answerObserver)
	if !ok {
		r.listedDetector = true // nothing to list, ever
		return
	}
	if d := o.watch.content[0]; d != nil {
		r.hot.Add(unsafe.Pointer(d), unsafe.Sizeof(*d))
		r.listedDetector = true
	}
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
	r.step = relayStep{r: r, w: w, ub: ub, start: start, st: st, at: relayWait}
	pumped, err := ub.pump(&r.step, &r.hot)
	at, stop := r.step.at, r.step.stop
	r.step = relayStep{}
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

// relayStep is relayBody's pumped step, a part of the stream's relay, which
// its hot lines list (rawsock.Stepper): relay until a read would wait.
type relayStep struct {
	r     *streamRelay
	w     *bufio.Writer
	ub    *upstreamBody
	start time.Time
	st    *relayStats
	at    relayed
	stop  error
}

func (s *relayStep) Step() bool {
	s.r.warm(s.ub)
	s.at, s.stop = s.r.relay(s.w, s.ub, s.start, s.st, true)
	return s.at != relayWait
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
			if r.ev, err = r.next(); err == sse.ErrWouldBlock {
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
				next, ok := r.nextBuffered(false)
				if !ok && !r.raw && r.ready() {
					batch = appendBatch(batch, out)
					out = nil
					next, ok = r.nextBuffered(true)
				}
				if ok {
					if out != nil {
						batch = appendBatch(batch, out)
					}
					r.ev, ready = next, true
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
			// One event beyond stream.max_event_bytes (docs/streams.md: long lines),
			// or a panic while parsing or observing (fail open): stop
			// parsing and pass the rest through as it comes, after what
			// the observer held back.
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

// serverWriteBuf is the server's write buffer, one per connection.
const serverWriteBuf = 2 << 10

// batchMax bounds the events relay sends in one write. A burst larger than
// the server's write buffer is framed as one chunk by streamBody's writer
// (chunkWriter) and sent in one write all the same.
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

// passBody relays a non-streamed body that is not held whole; fasthttp
// closes it when the response is written. It implements CloseWithError and
// not io.Closer: fasthttp calls both where both exist, and the response
// must be accounted once.
type passBody struct {
	r    io.Reader
	body *upstreamBody
	n    int64
	done func(n int64, err error)
	once sync.Once
}

func (p *passBody) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	return n, err
}

func (p *passBody) CloseWithError(err error) error {
	p.once.Do(func() {
		p.body.Close(err)
		p.done(p.n, err)
	})
	return nil
}

// statusClientClosed is nginx's status for a request whose client closed
// the connection before the answer: logged and counted, never sent.
const statusClientClosed = 499

// upstreamErrorStatus maps a failed upstream exchange to the status the client gets.
func upstreamErrorStatus(err error) (status int, code string) {
	var de *dialError
	switch {
	case errors.As(err, &de), errors.Is(err, fasthttp.ErrNoFreeConns), errors.Is(err, fasthttp.ErrConnectionClosed):
		return fasthttp.StatusBadGateway, "upstream_unreachable"
	case errors.Is(err, errIdle), errors.Is(err, errDeadline), isTimeout(err):
		return fasthttp.StatusGatewayTimeout, "upstream_timeout"
	default:
		return fasthttp.StatusBadGateway, "upstream_error"
	}
}

// errorReason describes err for a client without leaking internals.
func errorReason(err error) string {
	var de *dialError
	var oe *net.OpError
	switch {
	case errors.As(err, &de):
		return "cannot connect to the upstream"
	case errors.Is(err, errIdle):
		return "the upstream sent nothing within upstream.idle_timeout"
	case errors.Is(err, errDeadline):
		return "the request exceeded upstream.request_timeout"
	case isTimeout(err):
		return "the upstream did not answer within upstream.header_timeout"
	case errors.As(err, &oe), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection to the upstream failed"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no free connection to the upstream (upstream.max_conns)"
	}
	var he *responseHeaderError
	if errors.As(err, &he) {
		return he.Error()
	}
	// Anything else (fasthttp's parse errors quote the upstream's bytes) is
	// named by its class only.
	return "the upstream's response could not be read"
}

// respond accounts for a finished response: the chat observer adds what it
// knows, then one log line and the metrics.
func (s *Server) respond(obs responseObserver, method, path []byte, cause error, info observe.ResponseInfo) {
	// Path only picks the metrics label during Response: a view of the
	// bytes, not a copy.
	info.Path = rawjson.View(path)
	if obs != nil {
		// The observer gets a copy: a pointer to info itself would move it
		// to the heap on every response, observed or not.
		observed := info
		s.observeFinish(obs, cause, &observed)
		info = observed
	}
	s.obs.Response(info)
	e := s.log.Info().Bytes("method", method).Bytes("path", path).Int("status", info.Status).
		Dur("upstream_latency", info.UpstreamLatency).Dur("duration", info.Duration).Int64("bytes", info.Bytes)
	if info.Streamed {
		e = e.Dur("ttfb", info.TTFB).Int("events", info.Events)
	}
	if info.Session != "" {
		e = e.Str("session", info.Session)
	}
	if info.Transport != "" {
		e = e.Str("transport", info.Transport)
	}
	e.AnErr("end", cause).Msg("request")
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
