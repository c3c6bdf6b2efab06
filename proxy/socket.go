package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
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
// at once on a 426 and only after seconds of retries on anything else. It
// checks the client's handshake first: the upstream is dialled with the
// client's credentials, or the operator's key, for no handshake that the
// upgrader would then refuse.
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
	// share is what the client's message being read holds of the body
	// budget; refusing: a message that did not fit is being refused
	// (refuseMessage), which ends the socket.
	share    budgetShare
	refusing atomic.Bool
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
	sk.share.budget = &s.bodies
	// A handshake the upgrader would refuse is refused before the upstream
	// is dialled with the client's (or the operator's) credentials.
	if status, why := checkHandshake(ctx); status != 0 {
		writeError(ctx, status, "loopguard: invalid WebSocket handshake: "+why, "invalid_request_error", "bad_handshake")
		if status == fasthttp.StatusUpgradeRequired {
			ctx.Response.Header.Set("Sec-WebSocket-Version", "13")
		}
		s.respond(nil, ctx.Method(), ctx.Path(), nil, observe.ResponseInfo{Session: string(sk.session), Status: status,
			Duration: time.Since(start)})
		return
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
	upc, resp, err := d.DialContext(s.stopping, socketURL(up, ctx), s.socketHeader(ctx))
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
	// The handler closes the connection it took over (KeepHijackedConns).
	if err := u.Upgrade(ctx, func(c *websocket.Conn) { defer c.Close(); sk.run(c, upc) }); err != nil {
		_ = upc.Close()
		s.respond(nil, ctx.Method(), ctx.Path(), err, observe.ResponseInfo{Session: string(sk.session),
			Status: ctx.Response.StatusCode(), Duration: time.Since(start)})
	}
}

// checkHandshake checks a client's opening handshake as RFC 6455 section
// 4.2.1 asks, and the upgrader would: Connection: Upgrade, version 13 and a
// key of 16 bytes in base64. It returns 0, or the status to refuse it with
// (426 for another version, which names the one spoken) and why.
func checkHandshake(ctx *fasthttp.RequestCtx) (int, string) {
	h := &ctx.Request.Header
	if !tokenListHas(h.Peek("Connection"), "upgrade") {
		return fasthttp.StatusBadRequest, "Connection does not hold upgrade"
	}
	if string(h.Peek("Sec-WebSocket-Version")) != "13" {
		return fasthttp.StatusUpgradeRequired, "Sec-WebSocket-Version must be 13"
	}
	key := bytes.TrimSpace(h.Peek("Sec-WebSocket-Key"))
	var raw [18]byte
	if n, err := base64.StdEncoding.Decode(raw[:], key); err != nil || n != 16 || len(key) != 24 {
		return fasthttp.StatusBadRequest, "Sec-WebSocket-Key is not 16 bytes in base64"
	}
	return 0, ""
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
func (s *Server) socketHeader(ctx *fasthttp.RequestCtx) http.Header {
	h := make(http.Header)
	key := s.operatorKey(ctx)
	conn := ctx.Request.Header.Peek("Connection")
	for k, v := range ctx.Request.Header.All() {
		switch {
		case isHopByHop(k, conn), asciiEqualFold(k, "Host"), asciiEqualFold(k, "Content-Length"),
			asciiEqualFold(k, "Sec-WebSocket-Key"), asciiEqualFold(k, "Sec-WebSocket-Version"),
			asciiEqualFold(k, "Sec-WebSocket-Extensions"):
			continue
		case key != "" && asciiEqualFold(k, "Authorization"):
			continue
		case asciiEqualFold(k, "Sec-WebSocket-Protocol"):
			h["Sec-WebSocket-Protocol"] = append(h["Sec-WebSocket-Protocol"], string(v))
			continue
		}
		h.Add(string(k), string(v))
	}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
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
	sk.share.giveBack()
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
// reply; after a dropped connection the other is dropped too, as the
// peer did, at once. The library reports a connection that ended without
// a close frame as a close of code 1006, which no peer sends.
func ended(err error, other net.Conn) {
	if peerClosed(err) {
		_ = other.SetReadDeadline(time.Now().Add(socketControlTimeout))
		return
	}
	_ = other.Close()
}

// peerClosed reports a reader's end that was a close frame from the peer.
func peerClosed(err error) bool {
	var ce *websocket.CloseError
	return errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure
}

// socketKeepBuf is the largest message buffer a socket keeps for its next
// message; a larger one is let go once its message is relayed, so that an
// idle socket holds no more.
const socketKeepBuf = 64 << 10

// fromClient relays the client's messages to the upstream, each
// response.create through the pipeline (socketTurn), until the client's
// side ends. A message is taken from the body budget as it is read; one
// that does not fit ends the socket with 1013 (try again later).
func (sk *socket) fromClient() {
	msg := limitWriter{hold: &sk.share}
	for {
		mt, r, err := sk.client.NextReader()
		if err != nil {
			ended(err, sk.upstream.NetConn())
			return
		}
		msg.b = msg.b[:0]
		if _, err = msg.ReadFrom(r); err != nil {
			if msg.short {
				letGo(&msg)
				sk.refuseMessage(r)
				return
			}
			ended(err, sk.upstream.NetConn())
			return
		}
		send := msg.b
		var turn *socketTurn
		if mt == websocket.TextMessage {
			var forward bool
			if send, turn, forward = sk.clientMessage(msg.b); !forward {
				letGo(&msg)
				continue
			}
		}
		err = sk.upstream.WriteMessage(mt, send)
		if turn != nil {
			sk.sent(turn)
		}
		letGo(&msg)
		if err != nil {
			_ = sk.clientConn.Close()
			return
		}
	}
}

// refuseMessage ends a socket whose client's message, the rest of which
// r holds, does not fit in the body budget: the client is told why (1013,
// try again later), the upstream socket closed, and the rest of the
// message read and discarded for a while (as linger does for a refused
// body), so that the client reads the close rather than a reset.
func (sk *socket) refuseMessage(r io.Reader) {
	sk.refusing.Store(true)
	sk.toClient.Lock()
	_ = sk.client.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseTryAgainLater, "server.max_body_memory"),
		time.Now().Add(socketControlTimeout))
	sk.toClient.Unlock()
	_ = sk.upstream.NetConn().Close()
	_ = sk.clientConn.SetReadDeadline(time.Now().Add(lingerFor))
	buf := lingerBufs.Get().(*[4 << 10]byte)
	defer lingerBufs.Put(buf)
	_, _ = io.CopyBuffer(io.Discard, r, buf[:])
	// The client's close reply, or the deadline.
	_, _, _ = sk.client.NextReader()
}

// letGo gives back a message buffer past socketKeepBuf, and what it held.
func letGo(msg *limitWriter) {
	if c := cap(msg.b); c > socketKeepBuf {
		msg.hold.drop(int64(msg.held))
		msg.b, msg.held = nil, 0
		if c >= largeBuffer {
			returnMemory()
		}
	}
}

// fromUpstream relays the upstream's messages to the client, each event of
// a guarded turn's answer through its observer, until the upstream's side
// ends or a cut ends it. An upstream that drops its connection, mid-message
// or between messages, ends the client's socket with 1011.
func (sk *socket) fromUpstream() {
	var msg limitWriter
	for {
		mt, r, err := sk.upstream.NextReader()
		if err == nil {
			msg.b = msg.b[:0]
			_, err = msg.ReadFrom(r)
		}
		if err != nil {
			if sk.cutDone() || sk.refusing.Load() {
				return // the client's side ends the socket
			}
			if !peerClosed(err) && !errors.Is(err, net.ErrClosed) {
				sk.toClient.Lock()
				_ = sk.client.WriteControl(websocket.CloseMessage,
					websocket.FormatCloseMessage(websocket.CloseInternalServerErr, "upstream connection lost"),
					time.Now().Add(socketShutdownWrite))
				sk.toClient.Unlock()
			}
			ended(err, sk.clientConn)
			return
		}
		if mt == websocket.TextMessage {
			stop := sk.upstreamMessage(msg.b)
			letGo(&msg)
			if stop {
				return
			}
			continue
		}
		err = sk.write(mt, msg.b)
		letGo(&msg)
		if err != nil {
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
