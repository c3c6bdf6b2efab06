package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/internal/wireapi"
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
	// What loopguard watches the answer of is an inference call on an API
	// it guards.
	x.inference = obs != nil
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
			ctx.Hijack(func(c net.Conn) { _ = c.Close() })
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
		s.relayStream(ctx, ub, obs, start, headerLatency, wireapi.SSE)
		return
	}
	if obs != nil && isNDJSON(resp.Header.ContentType()) {
		// A guarded NDJSON answer (Ollama's) is relayed and watched line
		// by line as SSE is; unguarded ones pass through below.
		s.relayStream(ctx, ub, obs, start, headerLatency, wireapi.NDJSON)
		return
	}
	if obs != nil && status == fasthttp.StatusOK && streamsArray(ctx.Path()) && isJSON(resp.Header.ContentType()) {
		// A guarded stream that is one JSON array (Gemini's without
		// alt=sse) is relayed and watched element by element.
		s.relayStream(ctx, ub, obs, start, headerLatency, wireapi.JSONArray)
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
	key := s.operatorKey(ctx)
	for k, v := range in.Header.All() {
		switch {
		case isHopByHop(k, conn), asciiEqualFold(k, "Host"), asciiEqualFold(k, "Content-Length"):
			continue
		case key != "" && asciiEqualFold(k, "Authorization"):
			continue
		case inspected && asciiEqualFold(k, "Accept-Encoding"):
			// We parse what comes back, which identity keeps cheap; an
			// upstream that compresses anyway is decoded (docs/streams.md:
			// compression).
			continue
		}
		req.Header.AddBytesKV(k, v)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
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

// streamsArray reports a request path whose API streams its answers as
// one JSON array when they are not SSE (the registry's JSONArray framing),
// and that asks for a stream.
func streamsArray(path []byte) bool {
	r := wireapi.Match(path)
	return r.API != nil && r.Stream && r.API.Framing == wireapi.JSONArray
}

// isJSON reports an application/json content type, parameters aside.
func isJSON(ct []byte) bool {
	ct, _, _ = bytes.Cut(ct, []byte{';'})
	return asciiEqualFold(bytes.TrimSpace(ct), "application/json")
}

func isNDJSON(ct []byte) bool {
	ct, _, _ = bytes.Cut(ct, []byte{';'})
	ct = bytes.TrimSpace(ct)
	return asciiEqualFold(ct, "application/x-ndjson") || asciiEqualFold(ct, "application/ndjson")
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
