package proxy

import (
	"bytes"
	"io"
	"sync"
	"time"

	"github.com/loopguard/loopguard/policy"
	"github.com/valyala/fasthttp"
)

// Resumable streams (llama.cpp's llama-server): a chat request with an
// X-Conversation-Id header goes on generating into a buffer when its
// connection closes, so that the client can fetch the answer again with
// GET /v1/stream/<id>; DELETE /v1/stream/<id> stops it. Closing the upstream
// connection, which is how a cut stops vLLM and llama.cpp otherwise
// (docs/streams.md: releasing a cut connection), leaves such a generation
// running to max_tokens, so a cut also sends the DELETE. A client that
// hangs up has chosen to resume later: its generation is left running, and
// the resume and the DELETE pass through unchanged.

// headerConversation names a resumable stream on llama-server.
const headerConversation = "X-Conversation-Id"

// streamPath is llama-server's route of a resumable stream, /v1/stream/<id>.
const streamPath = "/v1/stream/"

// stopTimeout bounds one DELETE that stops a cut generation.
const stopTimeout = 5 * time.Second

// resumeStopper sends the DELETEs of cut resumable streams, off the
// client's path; each upstream remembers whether it has no such route
// (upstream.noResume).
type resumeStopper struct {
	// running counts DELETEs in flight; Shutdown waits for them.
	running sync.WaitGroup
}

// resumable is what stopping one resumable stream needs, copied out of its
// request: the stream writer that sees the cut must not touch RequestCtx.
type resumable struct {
	s *Server
	// up is the upstream the stream came from, and the DELETE's: with
	// upstream.anthropic_url set, an Anthropic client's stream and its
	// credentials belong to that upstream alone.
	up *upstream
	// uri is the DELETE's path on the upstream.
	uri []byte
	// auth holds the request's credential headers, name and value in turn.
	auth [][]byte
}

// resumableOf returns how to stop ctx's generation if it is a resumable
// stream (an X-Conversation-Id request, or a resume), or nil.
func (s *Server) resumableOf(ctx *fasthttp.RequestCtx) *resumable {
	up := s.upstreamFor(ctx)
	if up.noResume.Load() {
		return nil
	}
	var p []byte
	if id := ctx.Request.Header.Peek(headerConversation); len(id) > 0 {
		if !safeStreamID(id) {
			return nil
		}
		p = append(p, streamPath...)
		p = append(p, id...)
	} else if isResume(ctx) {
		path := ctx.Path()
		if !safeStreamID(path[bytes.LastIndex(path, []byte(streamPath))+len(streamPath):]) {
			return nil
		}
		p = ctx.URI().PathOriginal()
	} else {
		return nil
	}
	r := &resumable{s: s, up: up, uri: up.path(nil, p)}
	key := s.operatorKey(ctx)
	for _, h := range credentialHeaders {
		v := ctx.Request.Header.Peek(h)
		if key != "" && h == "Authorization" {
			v = []byte("Bearer " + key)
		}
		if len(v) > 0 {
			r.auth = append(r.auth, []byte(h), append([]byte(nil), v...))
		}
	}
	return r
}

// safeStreamID reports a conversation id a DELETE may name: letters,
// digits and -_.: only, and not a dot-segment. Any other (an escaped
// slash, "..") could name another resource once an upstream, or a proxy
// in front of it, decodes and resolves the path; such a stream is not
// stopped by loopguard, which is no worse than without it.
func safeStreamID(id []byte) bool {
	if len(id) == 0 || string(id) == "." || string(id) == ".." {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

// isResume reports whether ctx fetches a resumable stream again:
// GET .../v1/stream/<id>.
func isResume(ctx *fasthttp.RequestCtx) bool {
	p := ctx.Path()
	i := bytes.LastIndex(p, []byte(streamPath))
	return ctx.IsGet() && i >= 0 && len(p) > i+len(streamPath)
}

// stop asks the upstream to end the generation, in the background. A nil
// r (not a resumable stream) does nothing.
func (r *resumable) stop() {
	if r == nil {
		return
	}
	r.s.resume.running.Add(1)
	go func() {
		defer r.s.resume.running.Done()
		r.s.stopGeneration(r)
	}()
}

func (s *Server) stopGeneration(r *resumable) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.DisableNormalizing()
	req.Header.SetMethod(fasthttp.MethodDelete)
	req.SetRequestURIBytes(r.uri)
	req.Header.SetHost(r.up.host)
	for i := 0; i+1 < len(r.auth); i += 2 {
		req.Header.SetBytesKV(r.auth[i], r.auth[i+1])
	}
	x := &exchange{}
	timer := time.AfterFunc(stopTimeout, func() { x.abort(errDeadline) })
	defer timer.Stop()
	resp := fasthttp.AcquireResponse()
	body, err := r.up.roundTrip(x, req, resp)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		s.log.Warn().Str("reason", errorReason(err)).Msg("could not stop a cut resumable stream upstream")
		return
	}
	status := resp.StatusCode()
	// Read the (empty or short) answer to its end so that the connection
	// can serve another request; Close releases resp.
	_, err = io.CopyN(io.Discard, body, 64<<10)
	if err == io.EOF {
		err = nil
	}
	body.Close(err)
	switch status {
	case fasthttp.StatusNotFound, fasthttp.StatusMethodNotAllowed:
		if r.up.noResume.CompareAndSwap(false, true) {
			s.log.Info().Int("status", status).Msg("upstream has no DELETE " + streamPath + "<id>; cut streams with " + headerConversation + " are no longer stopped by it")
		}
	}
}

// serveResume relays GET /v1/stream/<id>, a resumed chat stream, through
// the stream inspection of chat answers: it has no request history, so no
// ladder applies, but a degenerate answer is cut as on its first delivery.
func (p *pipeline) serveResume(ctx *fasthttp.RequestCtx, s *Server) {
	pl := plan{api: chatAPI, requestFacts: requestFacts{stream: true}, decision: policy.Decision{Action: policy.None}, start: time.Now()}
	pl.resume = s.resumableOf(ctx)
	s.forward(ctx, nil, newAnswerObserver(p, &pl, s.chatDone))
}
