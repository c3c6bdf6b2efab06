package fakellm

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The Responses API's WebSocket mode: GET …/responses with Upgrade:
// websocket, then response.create messages (a request body with a "type"
// member), each answered with the events of its SSE stream, one message per
// event. The conversation is kept on the socket: a turn names the response
// it continues with previous_response_id and sends only the new input.
//
// Each turn is recorded as the POST it stands for (Request.Socket set), and
// the script answers it as it would that POST: the rule sees the full input,
// rebuilt from the socket's earlier turns and their outputs.

// socketTurnQueue bounds the response.create messages waiting for the
// answers before them: a client sends the next turn after an answer ends.
const socketTurnQueue = 64

// socketWriteTimeout bounds one message's write to a peer that stopped
// reading.
const socketWriteTimeout = 10 * time.Second

// RefuseSockets makes the server refuse (on) or accept (off, the default)
// the Responses WebSocket upgrade. A refused upgrade is answered 426 with
// an OpenAI-style error, which sends clients that have an HTTP fallback to
// it at once.
func (s *Server) RefuseSockets(on bool) {
	s.mu.Lock()
	s.refuseSockets = on
	s.mu.Unlock()
}

// isSocketUpgrade reports a WebSocket handshake on a Responses path.
func isSocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/responses") &&
		headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// socketRuleMatches reports whether a rule of the script claims the
// handshake itself (a test that answers the GET with its own status).
func (s *Server) socketRuleMatches(req *Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rule := range s.script.Rules {
		if rule.Match != nil && rule.Match(req) {
			return true
		}
	}
	return false
}

// serveSocket answers a Responses WebSocket handshake: refused with 426 when
// RefuseSockets is on, else upgraded and served until either side ends it.
// The handshake is recorded as an exchange with status 101 (or 426); it is
// Done when the socket ends, PeerClosed when the client ended it.
func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request, req Request) {
	x := &Exchange{Request: req}
	s.mu.Lock()
	refuse := s.refuseSockets
	x.Seq = s.seq
	s.seq++
	if !s.noRecord {
		s.log = append(s.log, x)
		s.notifyLocked()
	}
	s.mu.Unlock()
	if refuse {
		body := []byte(`{"error":{"message":"fakellm: WebSocket mode refused","type":"invalid_request_error","param":null,"code":"websocket_not_supported"}}`)
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		s.write(w, r, x, &Response{}, &rendered{status: http.StatusUpgradeRequired, header: h, body: body})
		return
	}
	u := websocket.Upgrader{
		// Tests dial from anywhere on loopback; compression is declined, as
		// a server may.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	if p := websocket.Subprotocols(r); len(p) > 0 {
		u.Subprotocols = p[:1]
	}
	c, err := u.Upgrade(w, r, nil)
	if err != nil {
		s.finish(x, 0)
		return
	}
	s.update(x, func(x *Exchange) { x.Status = http.StatusSwitchingProtocols })
	sk := &fakeSocket{s: s, c: c, hs: req, turns: make(chan []byte, socketTurnQueue),
		history: make(map[string][]byte)}
	sk.serve(x)
}

// fakeSocket is one accepted socket: the handler's goroutine reads it, a
// second one answers its turns in order.
type fakeSocket struct {
	s     *Server
	c     *websocket.Conn
	hs    Request // the handshake
	turns chan []byte
	// history maps a response id produced on this socket to the full input
	// that continues it: its request's input, then its output items.
	history map[string][]byte
	// prewarms counts the prewarms answered, for their ids.
	prewarms uint64

	mu      sync.Mutex
	current *Exchange // the turn being answered, nil between turns
	writeMu sync.Mutex
}

func (sk *fakeSocket) serve(x *Exchange) {
	ctx, cancel := context.WithCancel(sk.s.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sk.answerTurns(ctx)
	}()
	// Close ends the socket: the hijacked connection is no longer the
	// http.Server's to close.
	stop := context.AfterFunc(sk.s.ctx, func() { _ = sk.c.NetConn().Close() })
	var peerClosed bool
	for {
		_, msg, err := sk.c.ReadMessage()
		if err != nil {
			peerClosed = sk.s.ctx.Err() == nil
			break
		}
		if gjson.GetBytes(msg, "type").String() != "response.create" {
			continue // response.cancel and the like: nothing to stop here
		}
		select {
		case sk.turns <- msg:
		default:
			// A client that floods turns without reading answers is
			// dropped.
			peerClosed = true
		}
		if peerClosed {
			break
		}
	}
	now := time.Now()
	sk.mu.Lock()
	if cur := sk.current; cur != nil && peerClosed {
		sk.s.update(cur, func(x *Exchange) {
			if !x.Done {
				x.PeerClosed, x.ClosedAt = true, now
			}
		})
	}
	sk.mu.Unlock()
	cancel()
	close(sk.turns)
	<-done
	stop()
	_ = sk.c.Close()
	sk.s.update(x, func(x *Exchange) {
		x.PeerClosed, x.ClosedAt = peerClosed, now
		x.Done, x.Finished = true, now
	})
}

// answerTurns answers each queued response.create in order until ctx ends.
func (sk *fakeSocket) answerTurns(ctx context.Context) {
	for msg := range sk.turns {
		if ctx.Err() != nil {
			continue // drained: the socket is over
		}
		sk.answer(ctx, msg)
	}
}

// answer plays one response.create: a prewarm (generate false) gets an
// empty response, a turn the script's answer to the POST it stands for.
func (sk *fakeSocket) answer(ctx context.Context, msg []byte) {
	body, prev, ok := sk.fullBody(msg)
	if !ok {
		sk.send(ctx, nil, []byte(`{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"previous_response_not_found","message":"Previous response with id '`+prev+`' not found.","param":"previous_response_id"}}`))
		return
	}
	if g := gjson.GetBytes(msg, "generate"); g.Type == gjson.False {
		sk.prewarm(ctx, body)
		return
	}
	res := gjson.GetManyBytes(body, "model")
	req := sk.hs
	req.Method = http.MethodPost
	req.Header = sk.hs.Header.Clone()
	req.Body, req.Received, req.Stream, req.Model, req.Socket = body, time.Now(), true, res[0].String(), true
	x := &Exchange{Request: req, Stream: true}
	s := sk.s
	s.mu.Lock()
	x.Seq = s.seq
	s.seq++
	if !s.noRecord {
		s.log = append(s.log, x)
		s.notifyLocked()
	}
	resp, picked := s.pickLocked(&req)
	s.mu.Unlock()
	sk.mu.Lock()
	sk.current = x
	sk.mu.Unlock()
	defer func() {
		sk.mu.Lock()
		sk.current = nil
		sk.mu.Unlock()
	}()
	out := exhausted()
	if picked {
		out = render(&resp, streamInfo{stream: true, model: req.Model, bodyLen: len(body)}, uint64(x.Seq))
	}
	s.update(x, func(x *Exchange) { x.Status, x.Header = http.StatusOK, out.header.Clone() })
	if !out.stream {
		// An answer the API would give as an HTTP error is its error event.
		ev := []byte(`{"type":"error"}`)
		ev, _ = sjson.SetBytes(ev, "status", out.status)
		if e := gjson.GetBytes(out.body, "error"); e.Exists() {
			ev, _ = sjson.SetRawBytes(ev, "error", []byte(e.Raw))
		}
		if !s.pause(ctx, resp.Delay) {
			s.closed(x, 1)
			return
		}
		sk.send(ctx, x, ev)
		s.finish(x, 0)
		return
	}
	delay := resp.Delay
	if out.repeat != nil && delay == 0 {
		delay = neverEndMinDelay
	}
	frames := out.frames
	if out.errs != nil && resp.ErrorAfter < len(frames) {
		frames = append(frames[:resp.ErrorAfter:resp.ErrorAfter], out.errs...)
	}
	var output []byte
	for i := 0; ; i++ {
		var f []byte
		switch {
		case i < len(frames):
			f = frames[i]
		case out.repeat != nil:
			f = out.repeat[(i-len(frames))%len(out.repeat)]
		default:
			sk.remember(body, output)
			s.finish(x, 0)
			return
		}
		if i > 0 && !s.pause(ctx, delay) {
			s.closed(x, s.remaining(out, i))
			return
		}
		for _, data := range frameData(f) {
			if gjson.GetBytes(data, "type").String() == "response.completed" {
				output = data
			}
			if !sk.send(ctx, x, data) {
				s.closed(x, s.remaining(out, i))
				return
			}
		}
	}
}

// fullBody is msg as the POST it stands for: the "type" and "generate"
// members dropped, and, when it continues a response of this socket, the
// full input (that response's, then the new items) in place of
// previous_response_id. ok false: the id is unknown here.
func (sk *fakeSocket) fullBody(msg []byte) (body []byte, prev string, ok bool) {
	body, _ = sjson.DeleteBytes(bytes.Clone(msg), "type")
	body, _ = sjson.DeleteBytes(body, "generate")
	prev = gjson.GetBytes(body, "previous_response_id").String()
	if prev == "" {
		return body, "", true
	}
	past, found := sk.history[prev]
	if !found {
		return nil, prev, false
	}
	in := append([]byte(nil), past...)
	if cur := gjson.GetBytes(body, "input"); cur.IsArray() {
		in = appendItems(in, cur)
	} else if cur.Type == gjson.String {
		in = appendItems(in, gjson.Parse(`[{"role":"user","content":`+cur.Raw+`}]`))
	}
	body, _ = sjson.SetRawBytes(body, "input", in)
	body, _ = sjson.DeleteBytes(body, "previous_response_id")
	return body, prev, true
}

// appendItems appends the elements of the JSON array arr to the array in.
func appendItems(in []byte, arr gjson.Result) []byte {
	items := arr.Array()
	if len(items) == 0 {
		return in
	}
	in = bytes.TrimSuffix(in, []byte("]"))
	for i, it := range items {
		if len(in) > 1 || i > 0 {
			in = append(in, ',')
		}
		in = append(in, it.Raw...)
	}
	return append(in, ']')
}

// remember records the input that continues the response whose
// response.completed event is completed: body's input and its output.
func (sk *fakeSocket) remember(body, completed []byte) {
	id := gjson.GetBytes(completed, "response.id").String()
	if id == "" {
		return
	}
	in := []byte("[]")
	if cur := gjson.GetBytes(body, "input"); cur.IsArray() {
		in = appendItems(in, cur)
	} else if cur.Type == gjson.String {
		in = appendItems(in, gjson.Parse(`[{"role":"user","content":`+cur.Raw+`}]`))
	}
	sk.history[id] = appendItems(in, gjson.GetBytes(completed, "response.output"))
}

// prewarm answers generate:false as the API does: a response with no
// output, created and completed at once, that later turns continue.
func (sk *fakeSocket) prewarm(ctx context.Context, body []byte) {
	sk.prewarms++
	// Seeded apart from the turns' exchange numbers, so the ids differ.
	rn := newResponsesRenderer(&ResponsesAnswer{}, gjson.GetBytes(body, "model").String(), len(body), 1<<32+sk.prewarms)
	rn.items = nil
	created := rn.responseObject([]byte(`{"type":"response.created","sequence_number":0,"response":`), "in_progress", false, false)
	completed := rn.responseObject([]byte(`{"type":"response.completed","sequence_number":1,"response":`), "completed", true, true)
	created, completed = append(created, '}'), append(completed, '}')
	if sk.send(ctx, nil, created) && sk.send(ctx, nil, completed) {
		sk.remember(body, completed)
	}
}

// send writes one event message, recording it in x when x is a turn.
func (sk *fakeSocket) send(ctx context.Context, x *Exchange, data []byte) bool {
	if ctx.Err() != nil {
		return false
	}
	sk.writeMu.Lock()
	_ = sk.c.SetWriteDeadline(time.Now().Add(socketWriteTimeout))
	err := sk.c.WriteMessage(websocket.TextMessage, data)
	sk.writeMu.Unlock()
	if x != nil {
		sk.s.update(x, func(x *Exchange) {
			if err == nil {
				x.Body = append(append(x.Body, data...), '\n')
				x.Events++
			}
		})
	}
	return err == nil
}

// frameData is the data of each SSE event in f ([DONE] and comments
// dropped): what a socket sends, one message each.
func frameData(f []byte) [][]byte {
	var out [][]byte
	for ev := range bytes.SplitSeq(f, []byte("\n\n")) {
		var data []byte
		n := 0
		for line := range bytes.SplitSeq(ev, []byte("\n")) {
			d, ok := bytes.CutPrefix(line, []byte("data:"))
			if !ok {
				continue
			}
			if n > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
			n++
		}
		if n == 0 || bytes.Equal(data, []byte("[DONE]")) {
			continue
		}
		out = append(out, data)
	}
	return out
}
