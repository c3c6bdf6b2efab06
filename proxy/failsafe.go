package proxy

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/loopguard/loopguard/internal/hotlines"
	"github.com/loopguard/loopguard/ndjson"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// The response path fails open (DESIGN.md section 1): sse/, the detectors
// and the chat observer read bytes the upstream chose, and a bug there that
// panics must neither kill the process nor cost the client a byte
// (docs/streams.md: a healthy stream arrives whole). Each stage that runs
// them recovers here: the stage is left out of the rest of the response,
// which passes through as the upstream sent it,
// and the failure is counted in loopguard_fail_open_total{stage="stream"}
// and logged, without content.

// stageStream is the fail-open stage of a panic on the response path.
const stageStream = "stream"

// recovered counts and logs a panic that the response path recovered from
// in the stage named where, and abandons obs (nil when the panic was not in
// it), naming the panic by panicText.
func (s *Server) recovered(obs responseObserver, where string, r any) {
	if obs != nil {
		obs.abandon()
	}
	s.obs.FailOpen(stageStream)
	s.log.Error().Str("stage", stageStream).Str("in", where).Str("panic", panicText(r)).
		Bytes("stack", debug.Stack()).Msg("fail open: the rest of the response passes through unchanged")
}

// panicText describes a recovered panic value without content: a runtime
// error's message (an index, a nil dereference), else the value's type,
// since any other value may quote the request or the answer.
func panicText(r any) string {
	if re, ok := r.(runtime.Error); ok {
		return re.Error()
	}
	return fmt.Sprintf("%T", r)
}

// observeHeader runs obs.header; false when it panicked, and obs must see
// nothing more of the response but its finish.
func (s *Server) observeHeader(obs responseObserver, status int, h *fasthttp.ResponseHeader) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(obs, "header", r)
			ok = false
		}
	}()
	obs.header(status, h)
	return true
}

// observeBody runs obs.body; nil, which keeps the upstream's body, when it
// panicked.
func (s *Server) observeBody(obs responseObserver, status int, b []byte, decoded bool) (out []byte) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(obs, "body", r)
			out = nil
		}
	}()
	return obs.body(status, b, decoded)
}

// observeFinish runs obs.finish; a panic leaves info as far as it got.
func (s *Server) observeFinish(obs responseObserver, cause error, info *observe.ResponseInfo) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(obs, "finish", r)
		}
	}()
	obs.finish(cause, info)
}

// observeCodedEvent runs obs.codedEvent; ok false when it panicked, and
// the rest of the stream passes uninspected.
func (s *Server) observeCodedEvent(obs codedObserver, ev *sse.Event) (ready, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(obs, "event", r)
			ready, ok = false, false
		}
	}()
	return obs.codedEvent(ev), true
}

// observeCodedEnd runs obs.codedEnd; ok false when it panicked.
func (s *Server) observeCodedEnd(obs codedObserver) (end []byte, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(obs, "end", r)
			end, ok = nil, false
		}
	}()
	return obs.codedEnd(nil), true
}

// streamRelay is what relayStream's event loop calls to parse and observe
// a stream, with a recover around each call. After a panic, raw is set:
// the loop stops parsing and copies the rest of the stream as it comes.
type streamRelay struct {
	s   *Server
	obs responseObserver // nil: events are forwarded as they are
	rd  *sse.Reader
	// nd, when not nil, reads an NDJSON stream (Ollama's) in rd's place:
	// one line an event.
	nd *ndjson.Reader
	// ev is the current event: one for the whole stream, as &ev goes to
	// the observer and a fresh variable per event would escape each time.
	ev    sse.Event
	out   []byte // what the client gets for the current event; reused
	raw   bool   // parsing or observing failed: pass the rest through
	ended bool   // obs.end was called, or event stopped the stream
	// warmed is what warm loaded: a use, so that the compiler keeps the
	// loads.
	warmed byte
	// hot lists what relaying an event reads first; the pump loads it
	// when the upstream's socket became readable (rawsock.Conn.Pump).
	hot  hotlines.List
	step relayStep // relayBody's, while it pumps
	// listedDetector: hot lists the text detector, which the observer
	// makes with the answer's first text.
	listedDetector bool
}

// warm loads, when the upstream's socket became readable, what relaying
// its next event reads that r.hot cannot list, found through what it
// lists: the reader's buffer where the next read lands, the body's
// reader's, and the observer's tables. With thousands of open streams all
// of it has left the cache between two events (docs/streams.md). Loading changes
// nothing, and a panic in it (there is none) would only skip it.
func (r *streamRelay) warm(ub *upstreamBody) {
	if r.raw {
		return
	}
	defer func() { _ = recover() }()
	if !r.listedDetector {
		r.listDetector()
	}
	if r.nd != nil {
		r.warmed = r.nd.Warm() + ub.warm()
	} else {
		r.warmed = r.rd.Warm() + ub.warm()
	}
	if r.obs != nil {
		r.obs.warm()
	}
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

// next reads the next event. A panic in the reader leaves the event's
// bytes in rd.Buffered and sets raw.
func (r *streamRelay) next() (ev sse.Event, err error) {
	if r.raw {
		return sse.Event{}, nil
	}
	defer func() {
		if p := recover(); p != nil {
			r.fail(nil, "sse", p)
			ev, err = sse.Event{}, nil
		}
	}()
	if r.nd != nil {
		return r.nd.Next()
	}
	return r.rd.Next()
}

// nextBuffered returns the next event when the reader holds all of it;
// false when it must read first, or it panicked (then raw is set). With
// read, it first reads what the upstream sent ahead and holds ready
// (sse.Reader.ReadReady): that moves the reader's buffer, and the events
// returned before are invalid after it.
func (r *streamRelay) nextBuffered(read bool) (ev sse.Event, ok bool) {
	if r.raw {
		return sse.Event{}, false
	}
	defer func() {
		if p := recover(); p != nil {
			r.fail(nil, "sse", p)
			ev, ok = sse.Event{}, false
		}
	}()
	if r.nd != nil {
		if read {
			return r.nd.ReadReady()
		}
		return r.nd.NextBuffered()
	}
	if read {
		return r.rd.ReadReady()
	}
	return r.rd.NextBuffered()
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
	if r.nd != nil {
		return r.nd.Buffered()
	}
	return r.rd.Buffered()
}

// ready reports that the reader's source holds bytes it can read at once.
func (r *streamRelay) ready() bool {
	if r.nd != nil {
		return r.nd.Ready()
	}
	return r.rd.Ready()
}
