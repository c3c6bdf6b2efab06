package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/loopguard/loopguard/observe"
	"github.com/valyala/fasthttp"
)

// The Responses API's WebSocket mode: GET /v1/responses with Upgrade:
// websocket, then response.create messages from the client and the same
// events as the SSE stream from the server, the conversation kept on the
// socket. loopguard opens the upstream socket before it answers the
// client's handshake, so that an upstream that refuses the upgrade refuses
// the client too, with its own status and body: Codex falls back to HTTP
// at once on a 426 and only after seconds of retries on anything else.
//
// The library is github.com/fasthttp/websocket, gorilla/websocket's code
// adapted to fasthttp: its upgrader takes the connection through
// RequestCtx.Hijack, so a socket costs no net/http server beside fasthttp,
// and its dialer is gorilla's, the most used Go client.
//
// Each socket is one goroutine per direction: the one fasthttp hijacks the
// connection on reads the client (socket.fromClient) and owns the other,
// which reads the upstream (socket.fromUpstream); either ending ends the
// other, and the socket is over when both are.

// socketControlTimeout bounds a control frame's write (ping, pong, close)
// and the wait for the peer's close reply.
const socketControlTimeout = 2 * time.Second

// socketShutdownWrite bounds the close frame that tells a client the server
// is going away: a client that does not read is not waited for.
const socketShutdownWrite = 200 * time.Millisecond

// socketMaxUpstreamMessage bounds one message from the upstream: an event
// with a whole response in it (response.completed) is the largest.
const socketMaxUpstreamMessage = 64 << 20

// isSocketUpgrade reports a WebSocket handshake on the Responses path.
func isSocketUpgrade(ctx *fasthttp.RequestCtx) bool {
	return ctx.IsGet() && guardedAPI(ctx.Path()) == responsesAPI &&
		tokenListHas(ctx.Request.Header.Peek("Upgrade"), "websocket")
}

// tokenListHas reports whether the comma-separated header value v holds
// token, compared without case.
func tokenListHas(v []byte, token string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte{','})
		if asciiEqualFold(bytes.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// socket is one client WebSocket and the upstream one it is relayed to.
type socket struct {
	s *Server
	// session and mode are the handshake's session id and X-Loopguard-Mode,
	// which name every turn's session as a request's would; path is the
	// request path, for the log.
	session, mode, path []byte
	client, upstream    *websocket.Conn
	// clientConn is the client's connection under the hijack: fasthttp's
	// wrapper ignores Close, and is emptied once run returns.
	clientConn net.Conn

	// toClient serialises messages to the client: the upstream's, relayed,
	// and loopguard's own answers to a turn.
	toClient sync.Mutex
	// mu guards turn, which both directions touch: the client's reader
	// opens a turn, the upstream's reader feeds and ends it.
	mu   sync.Mutex
	turn *socketTurn
	// cut: the upstream socket was closed because its answer was cut.
	cut bool
}

// serveSocket relays a Responses WebSocket handshake and, once the upstream
// accepted it, the socket.
func (s *Server) serveSocket(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	pcfg := s.pipeline.policy.Config()
	sk := &socket{
		s:       s,
		session: bytes.Clone(sessionID(ctx, &pcfg)),
		mode:    bytes.Clone(ctx.Request.Header.Peek(headerMode)),
		path:    bytes.Clone(ctx.Path()),
	}
	up := s.upstreamFor(ctx)
	d := websocket.Dialer{
		NetDialContext:   up.dial,
		HandshakeTimeout: s.cfg.Upstream.HeaderTimeout,
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  4 << 10,
		// Messages are read as they are sent, so that the same events reach
		// the detectors as on HTTP; permessage-deflate is declined on both
		// sides (a client that offers it works without).
		EnableCompression: false,
	}
	if up.client.IsTLS {
		d.TLSClientConfig = up.client.TLSConfig
	}
	upc, resp, err := d.DialContext(s.stopping, socketURL(up, ctx), socketHeader(ctx, up))
	if err != nil {
		status := s.refuseSocket(ctx, resp, err)
		s.respond(nil, ctx.Method(), ctx.Path(), err, observe.ResponseInfo{Session: string(sk.session), Status: status,
			UpstreamLatency: time.Since(start), Duration: time.Since(start)})
		return
	}
	u := websocket.FastHTTPUpgrader{
		ReadBufferSize:  4 << 10,
		WriteBufferSize: 4 << 10,
		// The upstream decides who may connect (it has the credentials);
		// a browser's Origin is its concern, as on HTTP.
		CheckOrigin: func(*fasthttp.RequestCtx) bool { return true },
	}
	if p := upc.Subprotocol(); p != "" {
		// The upstream chose among the client's offers: the client gets
		// the same choice.
		u.Subprotocols = []string{p}
	}
	copySocketHeader(&ctx.Response.Header, resp.Header)
	if err := u.Upgrade(ctx, func(c *websocket.Conn) { sk.run(c, upc) }); err != nil {
		_ = upc.Close()
		s.respond(nil, ctx.Method(), ctx.Path(), err, observe.ResponseInfo{Session: string(sk.session),
			Status: ctx.Response.StatusCode(), Duration: time.Since(start)})
	}
}

// socketURL is the upstream socket's URL: the request path joined onto the
// upstream's base as for HTTP, with the query.
func socketURL(up *upstream, ctx *fasthttp.RequestCtx) string {
	b := make([]byte, 0, 128)
	if up.client.IsTLS {
		b = append(b, "wss://"...)
	} else {
		b = append(b, "ws://"...)
	}
	b = append(b, up.host...)
	b = up.path(b, ctx.URI().PathOriginal())
	if q := ctx.URI().QueryString(); len(q) > 0 {
		b = append(b, '?')
		b = append(b, q...)
	}
	return string(b)
}

// socketHeader is the client's handshake as the upstream gets it: every
// end-to-end header (Authorization, OpenAI-Beta, session headers,
// x-codex-*), and the subprotocols offered. The dialer writes the
// handshake's own headers; extensions are not offered.
func socketHeader(ctx *fasthttp.RequestCtx, up *upstream) http.Header {
	h := make(http.Header)
	conn := ctx.Request.Header.Peek("Connection")
	for k, v := range ctx.Request.Header.All() {
		switch {
		case isHopByHop(k, conn), asciiEqualFold(k, "Host"), asciiEqualFold(k, "Content-Length"),
			asciiEqualFold(k, "Sec-WebSocket-Key"), asciiEqualFold(k, "Sec-WebSocket-Version"),
			asciiEqualFold(k, "Sec-WebSocket-Extensions"):
			continue
		case up.apiKey != "" && asciiEqualFold(k, "Authorization"):
			continue
		case asciiEqualFold(k, "Sec-WebSocket-Protocol"):
			h["Sec-WebSocket-Protocol"] = append(h["Sec-WebSocket-Protocol"], string(v))
			continue
		}
		h.Add(string(k), string(v))
	}
	if up.apiKey != "" {
		h.Set("Authorization", "Bearer "+up.apiKey)
	}
	return h
}

// copySocketHeader gives the client the upstream's end-to-end handshake
// headers (request ids, rate limits); the upgrader writes the handshake's
// own.
func copySocketHeader(dst *fasthttp.ResponseHeader, src http.Header) {
	conn := []byte(src.Get("Connection"))
	for k, vs := range src {
		kb := []byte(k)
		if isHopByHop(kb, conn) || hasPrefixFold(kb, "Sec-WebSocket-") || asciiEqualFold(kb, "Content-Length") {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

func hasPrefixFold(b []byte, p string) bool {
	return len(b) >= len(p) && asciiEqualFold(b[:len(p)], p)
}

// refuseSocket answers a handshake the upstream did not accept: its status,
// headers and body when it answered (a 426 sends Codex to HTTP at once),
// else loopguard's error as for HTTP. It returns the status.
func (s *Server) refuseSocket(ctx *fasthttp.RequestCtx, resp *http.Response, err error) int {
	if resp == nil {
		status, code := upstreamErrorStatus(err)
		if errors.Is(err, context.DeadlineExceeded) {
			status, code = fasthttp.StatusGatewayTimeout, "upstream_timeout"
		}
		writeError(ctx, status, "loopguard: upstream socket failed: "+errorReason(err), "upstream_error", code)
		return status
	}
	defer resp.Body.Close()
	ctx.Response.Header.DisableNormalizing()
	copySocketHeader(&ctx.Response.Header, resp.Header)
	ctx.SetStatusCode(resp.StatusCode)
	// The dialer keeps the start of the body: an error's JSON fits.
	body, _ := io.ReadAll(resp.Body)
	ctx.SetBody(body)
	return resp.StatusCode
}

// run relays the socket until either side ends it; it runs on the goroutine
// fasthttp hijacked the client connection on, and returns when both
// directions are done.
func (sk *socket) run(client, upstream *websocket.Conn) {
	sk.client, sk.upstream, sk.clientConn = client, upstream, underlying(client.NetConn())
	if !sk.s.sockets.add(sk) {
		_ = upstream.Close()
		return // the server is shutting down
	}
	defer sk.s.sockets.remove(sk)
	client.SetReadLimit(int64(sk.s.cfg.Server.MaxBodyBytes))
	upstream.SetReadLimit(socketMaxUpstreamMessage)
	relayControl(client, upstream)
	relayControl(upstream, client)

	done := make(chan struct{})
	go func() {
		defer close(done)
		sk.fromUpstream()
	}()
	sk.fromClient()
	<-done
	sk.endTurn(nil, errSocketClosed)
	_ = client.Close()
	_ = upstream.Close()
}

// underlying is the connection under fasthttp's hijack wrapper.
func underlying(c net.Conn) net.Conn {
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		return u.UnsafeConn()
	}
	return c
}

// errSocketClosed ends a turn whose socket closed before its answer did.
var errSocketClosed = errors.New("socket closed")

// relayControl passes from's pings, pongs and close frames on to to:
// keepalive and the close handshake are end to end. A close frame is also
// answered to from, as the protocol asks of its receiver.
func relayControl(from, to *websocket.Conn) {
	from.SetPingHandler(func(data string) error {
		_ = to.WriteControl(websocket.PingMessage, []byte(data), time.Now().Add(socketControlTimeout))
		return nil
	})
	from.SetPongHandler(func(data string) error {
		_ = to.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(socketControlTimeout))
		return nil
	})
	from.SetCloseHandler(func(code int, text string) error {
		msg := websocket.FormatCloseMessage(code, text)
		_ = to.WriteControl(websocket.CloseMessage, msg, time.Now().Add(socketControlTimeout))
		_ = from.WriteControl(websocket.CloseMessage, msg, time.Now().Add(socketControlTimeout))
		return nil
	})
}

// ended makes the other side's reader return once one side's reader has:
// after a close frame (already passed on) it has a moment to read the
// reply, after a dropped connection the other is dropped too, as the
// client did.
func ended(err error, other net.Conn) {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		_ = other.SetReadDeadline(time.Now().Add(socketControlTimeout))
		return
	}
	_ = other.Close()
}

// fromClient relays the client's messages to the upstream, each
// response.create through the pipeline (socketTurn), until the client's
// side ends.
func (sk *socket) fromClient() {
	var buf []byte
	for {
		mt, r, err := sk.client.NextReader()
		if err != nil {
			ended(err, sk.upstream.NetConn())
			return
		}
		if buf, err = readMessage(buf[:0], r); err != nil {
			ended(err, sk.upstream.NetConn())
			return
		}
		send := buf
		if mt == websocket.TextMessage {
			var forward bool
			if send, forward = sk.clientMessage(buf); !forward {
				continue
			}
		}
		err = sk.upstream.WriteMessage(mt, send)
		sk.sent()
		if err != nil {
			_ = sk.clientConn.Close()
			return
		}
	}
}

// fromUpstream relays the upstream's messages to the client, each event of
// a guarded turn's answer through its observer, until the upstream's side
// ends or a cut ends it.
func (sk *socket) fromUpstream() {
	var buf []byte
	for {
		mt, r, err := sk.upstream.NextReader()
		if err != nil {
			if sk.cutDone() {
				return
			}
			ended(err, sk.clientConn)
			return
		}
		if buf, err = readMessage(buf[:0], r); err != nil {
			ended(err, sk.clientConn)
			return
		}
		if mt == websocket.TextMessage {
			if stop := sk.upstreamMessage(buf); stop {
				return
			}
			continue
		}
		if err := sk.write(mt, buf); err != nil {
			_ = sk.upstream.NetConn().Close()
			return
		}
	}
}

// write sends one message to the client.
func (sk *socket) write(mt int, b []byte) error {
	sk.toClient.Lock()
	defer sk.toClient.Unlock()
	return sk.client.WriteMessage(mt, b)
}

// readMessage appends the rest of r to buf: one message, into a buffer
// the reader keeps for the next.
func readMessage(buf []byte, r io.Reader) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// sockets are the open sockets, which Shutdown closes: fasthttp no longer
// knows a hijacked connection.
type sockets struct {
	mu     sync.Mutex
	closed bool
	open   map[*socket]struct{}
	wg     sync.WaitGroup
}

// add registers sk; false when the server is shutting down.
func (ss *sockets) add(sk *socket) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	if ss.open == nil {
		ss.open = make(map[*socket]struct{})
	}
	ss.open[sk] = struct{}{}
	ss.wg.Add(1)
	return true
}

func (ss *sockets) remove(sk *socket) {
	ss.mu.Lock()
	delete(ss.open, sk)
	ss.mu.Unlock()
	ss.wg.Done()
}

// close tells every open socket's client that the server is going away
// (1001), closes the upstream sockets, and waits for the sockets to end
// until ctx does.
func (ss *sockets) close(ctx context.Context) error {
	// The lock keeps each socket's run from returning while it is told:
	// its client connection is fasthttp's until then.
	ss.mu.Lock()
	ss.closed = true
	deadline := time.Now().Add(socketShutdownWrite)
	for sk := range ss.open {
		_ = sk.client.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseGoingAway, "loopguard is shutting down"), deadline)
		_ = sk.upstream.NetConn().Close()
		_ = sk.clientConn.SetReadDeadline(time.Now().Add(socketControlTimeout))
	}
	ss.mu.Unlock()
	return waitCtx(ctx, &ss.wg)
}
