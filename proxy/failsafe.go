package proxy

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/loopguard/loopguard/observe"
	"github.com/valyala/fasthttp"
)

// The response path fails open (docs/design.md section 7): sse/, the detectors
// and the chat observer read bytes the upstream chose, and a bug there that
// panics must neither kill the process nor cost the client a byte
// (docs/streams.md: a healthy stream arrives whole). Each stage that runs
// them recovers, here or, for a stream's events, in stream.go's
// streamRelay: the stage is left out of the rest of the response, which
// passes through as the upstream sent it, and the failure is counted in
// loopguard_fail_open_total{stage="stream"} and logged, without content.

// recovered counts and logs a panic that the response path recovered from
// in the stage named where, and abandons obs (nil when the panic was not in
// it), naming the panic by panicText.
func (s *Server) recovered(obs responseObserver, where string, r any) {
	if obs != nil {
		obs.abandon()
	}
	s.obs.FailOpen(observe.StageStream)
	s.log.Error().Str("stage", string(observe.StageStream)).Str("in", where).Str("panic", panicText(r)).
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
