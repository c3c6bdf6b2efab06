package proxy

import (
	"bytes"
	"context"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
)

// socketResponsesAPI is the Responses API as it is spoken on a WebSocket:
// a response.create message is a request body with a "type" member. Its
// history is the socket's record (every turn is recorded: the upstream
// keeps the socket's responses even with store false), its answers are
// always streamed, as events on the socket.
var socketResponsesAPI = func() *wireAPI {
	api := *responsesAPI
	api.history = (*pipeline).prepareSocketRecord
	api.terminate = terminateOnSocket
	api.streamByDefault = true
	api.transport = transportSocket
	return &api
}()

// terminateOnSocket renders LOOP_DETECTED as the events of a streamed
// response, whatever the message's "stream" says: a socket has no other
// way to answer.
func terminateOnSocket(in *inject.Injector, body []byte, l inject.Loop) (inject.Response, error) {
	if !gjson.GetBytes(body, "stream").Bool() {
		if b, err := sjson.SetBytes(bytes.Clone(body), "stream", true); err == nil {
			body = b
		}
	}
	return in.TerminateResponses(body, l)
}

// socketTurn is one response.create on a socket and the answer the
// upstream streams for it, watched by the same observer as an SSE stream,
// through the same fail-open event step (streamRelay's event and end,
// stream.go). The socket's messages come framed, one event each, so the
// relay's read loop, which splits a byte stream into events and batches
// their writes, has nothing to do here: the socket's reader hands each
// message to upstreamMessage.
type socketTurn struct {
	rl    streamRelay
	plan  *plan
	start time.Time
	// events and bytes count what the client got of the answer.
	events int
	bytes  int64
	// frame and out are reused per event: the event framed as SSE for the
	// observer, and what the client gets at the answer's end.
	frame, out []byte
}

// newSocketTurn watches the answer to pl with an observer that reports to
// done.
func (sk *socket) newSocketTurn(pl *plan, done func(*ChatEvent)) *socketTurn {
	return &socketTurn{rl: streamRelay{s: sk.s, obs: newAnswerObserver(sk.s.pipeline, pl, done)}, plan: pl, start: pl.start}
}

// transportSocket names the transport of a turn on a socket in the log and
// the metrics.
const transportSocket = observe.TransportWebSocket

// clientMessage handles one text message from the client: a
// response.create is a turn, run through the pipeline; the rest pass as
// they are. It returns what the upstream gets and the turn it opened (nil
// for a message that is none), for sent; forward false when loopguard
// answered the turn itself.
func (sk *socket) clientMessage(msg []byte) (send []byte, t *socketTurn, forward bool) {
	if gjson.GetBytes(msg, "type").String() != "response.create" {
		return msg, nil, true
	}
	p := sk.s.pipeline
	if g := gjson.GetBytes(msg, "generate"); g.Type == gjson.False {
		// A prewarm: the upstream only takes the instructions and tools in,
		// and the agent's first turn continues it by id. It passes as sent;
		// its input starts the socket's record.
		_, rec, _ := socketResponsesAPI.history(p, context.Background(), msg)
		if rec != nil {
			pl := &plan{api: socketResponsesAPI, requestFacts: requestFacts{passive: true, stream: true}, record: rec, start: time.Now()}
			t = sk.newSocketTurn(pl, nil)
			sk.open(t)
		}
		return msg, t, true
	}
	pl := new(plan)
	*pl = p.decideFor(sk.session, sk.mode, socketResponsesAPI, msg)
	pl.start = time.Now()
	if pl.answer != nil {
		sk.answer(pl)
		return nil, nil, false
	}
	t = sk.newSocketTurn(pl, sk.s.chatDone)
	sk.open(t)
	return pl.body, t, true
}

// sent is called by the client's reader once the message that opened t was
// written upstream: t's due check goes to the judge, and a rewritten body's
// buffer can serve another. Both are the client reader's to do whether or
// not t is still the socket's turn: the upstream may answer, and its
// reader end t, before the write returns here. The upstream's reader reads
// neither the body nor whether the check was sent.
func (sk *socket) sent(t *socketTurn) {
	t.plan.releaseBody()
	sk.s.pipeline.submitCheck(t.plan)
}

// open makes t the socket's turn. A turn still open is over: the client
// asked for another answer without waiting for its end.
func (sk *socket) open(t *socketTurn) {
	sk.mu.Lock()
	prev := sk.turn
	sk.turn = t
	sk.mu.Unlock()
	if prev != nil {
		sk.finish(prev, nil)
	}
}

// endTurn ends the socket's turn if it is t (any turn when t is nil).
func (sk *socket) endTurn(t *socketTurn, cause error) {
	sk.mu.Lock()
	cur := sk.turn
	if cur == nil || t != nil && cur != t {
		sk.mu.Unlock()
		return
	}
	sk.turn = nil
	sk.mu.Unlock()
	sk.finish(cur, cause)
}

// finish accounts for a turn that is over, as respond does for a request.
// Its body is sent's to let go of.
func (sk *socket) finish(t *socketTurn, cause error) {
	sk.s.respond(t.rl.obs, []byte(fasthttp.MethodGet), sk.path, cause, observe.ResponseInfo{
		Status: fasthttp.StatusOK, Duration: time.Since(t.start), Events: t.events, Bytes: t.bytes,
		Transport: transportSocket})
}

// answer sends loopguard's own answer to a turn (LOOP_DETECTED) on the
// socket, event by event as a response would stream; the upstream never
// sees the turn, and the socket goes on.
func (sk *socket) answer(pl *plan) {
	a := pl.answer
	var n int64
	var err error
	if isEventStream([]byte(headerOf(a, "Content-Type"))) {
		err = eachEvent(a.Body, func(data []byte) error {
			n += int64(len(data))
			return sk.write(websocket.TextMessage, data)
		})
	} else {
		// An error answer (inject.terminate_as = "error") is the error
		// event the socket has for it.
		ev := []byte(`{"type":"error"}`)
		ev, _ = sjson.SetBytes(ev, "status", a.Status)
		if e := gjson.GetBytes(a.Body, "error"); e.Exists() {
			ev, _ = sjson.SetRawBytes(ev, "error", []byte(e.Raw))
		}
		n = int64(len(ev))
		err = sk.write(websocket.TextMessage, ev)
	}
	sk.s.respond(nil, []byte(fasthttp.MethodGet), sk.path, err, observe.ResponseInfo{Session: pl.key, Status: a.Status,
		Duration: time.Since(pl.start), Bytes: n, Transport: transportSocket})
	if sk.s.chatDone != nil {
		ev := pl.event()
		ev.Terminated, ev.Status = true, a.Status
		sk.s.chatDone(&ev)
	}
}

func headerOf(a *inject.Response, name string) string {
	for _, h := range a.Header {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// eachEvent calls fn with the data of each event of the SSE text b; the
// comment lines loopguard writes for SSE clients have no place on a socket.
func eachEvent(b []byte, fn func(data []byte) error) error {
	rd := sse.NewReader(bytes.NewReader(b), len(b)+1)
	for {
		ev, err := rd.Next()
		if err != nil {
			return nil
		}
		if len(ev.Data) == 0 {
			continue
		}
		if err := fn(ev.Data); err != nil {
			return err
		}
	}
}

// upstreamMessage relays one text message from the upstream; an event of
// the open turn's answer goes through its observer first. stop: the answer
// was cut, and the upstream socket closed.
func (sk *socket) upstreamMessage(msg []byte) (stop bool) {
	sk.mu.Lock()
	t := sk.turn
	if t == nil {
		sk.mu.Unlock()
		if err := sk.write(websocket.TextMessage, msg); err != nil {
			_ = sk.upstream.NetConn().Close()
		}
		return false
	}
	// The turn is the upstream reader's until its end; the lock keeps the
	// client's reader from ending it (a new turn) in the middle of an event.
	typ := socketEventType(msg)
	out, stop, ok := sk.observe(t, typ, msg)
	var err error
	if !ok || bytes.Equal(out, t.frame) {
		t.events++
		t.bytes += int64(len(msg))
		err = sk.write(websocket.TextMessage, msg)
	} else {
		err = eachEvent(out, func(data []byte) error {
			t.events++
			t.bytes += int64(len(data))
			return sk.write(websocket.TextMessage, data)
		})
	}
	if stop {
		sk.cut = true
	}
	sk.mu.Unlock()
	switch {
	case stop:
		// The upstream socket is closed, so the model stops: the Responses
		// socket has no cancel that every upstream serves. The client got a
		// terminal event for the response; the close follows it.
		_ = sk.upstream.NetConn().Close()
		sk.endTurn(t, errCut)
		sk.toClient.Lock()
		_ = sk.client.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseNormalClosure, "loopguard: answer cut"),
			time.Now().Add(socketControlTimeout))
		sk.toClient.Unlock()
		_ = sk.clientConn.SetReadDeadline(time.Now().Add(socketControlTimeout))
		return true
	case err != nil:
		_ = sk.upstream.NetConn().Close()
	case terminalEvent(typ):
		sk.endTurn(t, nil)
	}
	return false
}

// cutDone reports whether the upstream socket ended because of a cut.
func (sk *socket) cutDone() bool {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	return sk.cut
}

// observe shows the observer one event, framed as the SSE event it would be
// on HTTP, and returns what the client gets as SSE text (the frame itself
// when nothing changed). ok false: the event goes as sent, the turn's
// observer having failed on an earlier one. An observer that panics on
// this one gives the client what it held and the event, and watches the
// turn no more (streamRelay.event).
func (sk *socket) observe(t *socketTurn, typ string, msg []byte) (out []byte, stop, ok bool) {
	if t.rl.raw {
		return nil, false, false
	}
	t.frame = appendFrame(t.frame[:0], typ, msg)
	ev := sse.Event{Name: t.frame[len("event: ") : len("event: ")+len(typ)], Data: msg, Raw: t.frame}
	out, stop = t.rl.event(&ev)
	if !stop && terminalEvent(typ) {
		// The answer is over: what the observer held back goes with its
		// last event. end reuses the buffer out is in.
		t.out = append(t.out[:0], out...)
		out = append(t.out, t.rl.end()...)
		t.out = out
	}
	if stop || terminalEvent(typ) {
		t.answered()
	}
	return out, stop, true
}

// answered counts the usage of t's answer toward its session's budget
// before the answer's last event reaches the client, who may send its next
// turn on the socket as soon as it has it: the client's reader decides that
// turn while this one's is not yet finished (endTurn follows the write). A
// panic there is the observer's failure like any other: the usage goes
// uncounted, and the answer passes.
func (t *socketTurn) answered() {
	o, ok := t.rl.obs.(*answerObserver)
	if !ok || t.rl.raw {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			t.rl.fail(o, "usage", p)
		}
	}()
	o.countUsage()
}

// appendFrame appends msg as the SSE event it would be on HTTP; a message
// with line breaks (JSON whitespace) becomes several data lines, which SSE
// joins back into the same bytes.
func appendFrame(b []byte, typ string, msg []byte) []byte {
	b = append(b, "event: "...)
	b = append(b, typ...)
	for {
		b = append(b, "\ndata: "...)
		i := bytes.IndexByte(msg, '\n')
		if i < 0 {
			b = append(b, msg...)
			break
		}
		b = append(b, msg[:i]...)
		msg = msg[i+1:]
	}
	return append(b, "\n\n"...)
}

// socketEventType is an event's type member, which servers put first.
func socketEventType(msg []byte) string {
	return gjson.GetBytes(msg, "type").String()
}

// terminalEvent reports an event that ends a response on a socket.
func terminalEvent(typ string) bool {
	switch typ {
	case "response.completed", "response.failed", "response.incomplete", "error":
		return true
	}
	return false
}
