package fakellm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// neverEndMinDelay paces a NeverEnd stream that has no Delay, so that an
// endless stream costs a test little CPU on a shared machine.
const neverEndMinDelay = 2 * time.Millisecond

// maxRequestBody caps what the fake reads of one request body; agents send
// whole histories, so it is generous.
const maxRequestBody = 256 << 20

// Request is a request as the fake received it.
type Request struct {
	Method   string
	Path     string // URL path as sent, escaped form
	RawQuery string
	Host     string
	// Header is the request header as received (net/http canonicalises
	// names; hop-by-hop fields are included).
	Header http.Header
	// Body is the request body, decoded when it came with a
	// Content-Encoding the fake reads (zstd, gzip, deflate).
	Body []byte
	// Coded is the body exactly as it arrived when it came with a
	// Content-Encoding, nil otherwise; Body is then its decoded form (or
	// Coded itself, for a coding the fake cannot read).
	Coded    []byte
	Received time.Time

	// Stream, IncludeUsage and Model are read from a JSON body
	// ("stream", "stream_options.include_usage", "model").
	Stream       bool
	IncludeUsage bool
	Model        string

	// Socket reports a response.create message on a Responses WebSocket,
	// recorded as the POST it stands for: Method is POST, Path, Host and
	// Header are the handshake's, Body is the message without its "type",
	// with the full input rebuilt when it continued an earlier response of
	// the socket. Its answer's events went out one message each; the
	// Exchange's Body holds them one per line.
	Socket bool
}

// Exchange is one request and the answer the fake sent to it.
type Exchange struct {
	// Seq numbers exchanges from 0 in arrival order.
	Seq     int
	Request Request
	// Status and Header are what the handler sent (net/http adds Date,
	// Content-Length or Transfer-Encoding on the wire).
	Status int
	Header http.Header
	// Body is every byte of the response body written to the peer.
	Body []byte
	// Stream reports an SSE answer.
	Stream bool
	// Events is the number of SSE events written (error and [DONE] frames
	// included).
	Events int
	// Unsent is the number of scripted events not sent when the stream
	// ended early; -1 for a NeverEnd stream (it always ends early).
	Unsent int
	// PeerClosed reports that the peer went away before the answer was
	// complete; ClosedAt is when the fake noticed.
	PeerClosed bool
	ClosedAt   time.Time
	// Done reports that the handler finished; Finished is when.
	Done     bool
	Finished time.Time
}

// TB is the part of testing.TB that Start uses; a *testing.T satisfies it.
// It is declared here so that the package does not link "testing" into the
// loopguard binary.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Server is a scripted LLM upstream. Create it with New, then Serve a
// listener (or use Start); Close stops it, ending endless streams. Its
// methods are safe for concurrent use.
type Server struct {
	hs     *http.Server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // running handlers

	mu       sync.Mutex
	url      string
	script   Script
	next     int
	seq      int
	noRecord bool
	// refuseSockets answers the Responses WebSocket upgrade 426.
	refuseSockets bool
	log           []*Exchange
	changed       chan struct{} // closed and replaced on every recorded change
}

// New returns a server that plays script. It does not listen yet.
func New(script Script) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ctx: ctx, cancel: cancel, script: script, changed: make(chan struct{})}
	s.hs = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		// The fake must not rewrite what it sends; no extra logging either.
		ErrorLog: nil,
	}
	return s
}

// Start starts a server on a free 127.0.0.1 port and closes it when the test
// ends.
func Start(tb TB, script Script) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("fakellm: listen: %v", err)
	}
	s := New(script)
	s.setURL(ln)
	go func() { _ = s.Serve(ln) }()
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func (s *Server) setURL(ln net.Listener) {
	s.mu.Lock()
	s.url = "http://" + ln.Addr().String()
	s.mu.Unlock()
}

// Serve accepts connections on ln until Close. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.setURL(ln)
	err := s.hs.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// URL returns the server's base URL without /v1 ("http://127.0.0.1:PORT"),
// or "" before Serve.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Close stops serving, ends running streams and waits for their handlers.
func (s *Server) Close() error {
	s.cancel()
	err := s.hs.Close()
	s.wg.Wait()
	return err
}

// SetRecording turns recording of exchanges on (the default) or off; load
// runs and the demo turn it off so memory stays flat.
func (s *Server) SetRecording(on bool) {
	s.mu.Lock()
	s.noRecord = !on
	s.mu.Unlock()
}

// Reset forgets recorded exchanges and restarts the script.
func (s *Server) Reset() {
	s.mu.Lock()
	s.log = nil
	s.next = 0
	s.notifyLocked()
	s.mu.Unlock()
}

// Exchanges returns a copy of every recorded exchange, in arrival order.
func (s *Server) Exchanges() []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

// Requests returns the recorded requests, in arrival order.
func (s *Server) Requests() []Request {
	xs := s.Exchanges()
	out := make([]Request, len(xs))
	for i := range xs {
		out[i] = xs[i].Request
	}
	return out
}

// Wait blocks until cond holds for the recorded exchanges or ctx ends, and
// returns the exchanges it last saw. It wakes on every recorded change (new
// request, event sent, stream ended), so tests poll without sleeping.
func (s *Server) Wait(ctx context.Context, cond func([]Exchange) bool) ([]Exchange, error) {
	for {
		s.mu.Lock()
		xs := s.snapshotLocked()
		ch := s.changed
		s.mu.Unlock()
		if cond(xs) {
			return xs, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return xs, fmt.Errorf("fakellm: wait: %w", ctx.Err())
		}
	}
}

func (s *Server) snapshotLocked() []Exchange {
	out := make([]Exchange, len(s.log))
	for i, x := range s.log {
		out[i] = *x
		out[i].Body = append([]byte(nil), x.Body...)
		out[i].Header = x.Header.Clone()
	}
	return out
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// update applies fn to x under the lock and wakes waiters.
func (s *Server) update(x *Exchange, fn func(*Exchange)) {
	s.mu.Lock()
	fn(x)
	s.notifyLocked()
	s.mu.Unlock()
}

// ServeHTTP answers one request from the script.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.wg.Add(1)
	defer s.wg.Done()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody))
	if err != nil {
		// The peer left while sending; nothing to answer.
		return
	}
	req := Request{
		Method:   r.Method,
		Path:     r.URL.EscapedPath(),
		RawQuery: r.URL.RawQuery,
		Host:     r.Host,
		Header:   r.Header.Clone(),
		Body:     body,
		Received: time.Now(),
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		req.Coded = body
		if d, err := decodeBody(ce, body); err == nil {
			req.Body = d
		}
	}
	body = req.Body
	if gjson.ValidBytes(body) {
		res := gjson.GetManyBytes(body, "stream", "stream_options.include_usage", "model")
		req.Stream, req.IncludeUsage, req.Model = res[0].Bool(), res[1].Bool(), res[2].String()
	}

	if isSocketUpgrade(r) && !s.socketRuleMatches(&req) {
		s.serveSocket(w, r, req)
		return
	}

	x := &Exchange{Request: req}
	s.mu.Lock()
	x.Seq = s.seq
	s.seq++
	if !s.noRecord {
		s.log = append(s.log, x)
		s.notifyLocked()
	}
	resp, ok := s.pickLocked(&req)
	s.mu.Unlock()

	var out *rendered
	switch {
	case ok:
		out = render(&resp, streamInfo{stream: req.Stream, includeUsage: req.IncludeUsage, model: req.Model, bodyLen: len(body)}, uint64(x.Seq))
	case isChat(&req):
		out = exhausted()
	case r.Method == http.MethodGet && strings.HasSuffix(req.Path, "/models"):
		out = jsonAnswer(modelsBody)
	case r.Method == http.MethodPost && strings.HasSuffix(req.Path, "/embeddings"):
		out = jsonAnswer(embeddings(&req))
	default:
		out = echo(&req)
	}
	s.write(w, r, x, &resp, out)
}

// pickLocked chooses the scripted response for req; ok is false when the
// request falls to the built-in routes.
func (s *Server) pickLocked(req *Request) (Response, bool) {
	for _, rule := range s.script.Rules {
		if rule.Match != nil && !rule.Match(req) {
			continue
		}
		if rule.Respond != nil {
			return rule.Respond(req), true
		}
		return rule.Response, true
	}
	if !isChat(req) {
		return Response{}, false
	}
	if s.next >= len(s.script.Responses) && s.script.Loop {
		s.next = 0
	}
	if s.next >= len(s.script.Responses) {
		return Response{}, false
	}
	resp := s.script.Responses[s.next]
	s.next++
	return resp, true
}

func isChat(req *Request) bool {
	return req.Method == http.MethodPost && req.API() == wireapi.Chat
}

// write sends out and records it in x.
func (s *Server) write(w http.ResponseWriter, r *http.Request, x *Exchange, resp *Response, out *rendered) {
	ctx := r.Context()
	if !out.stream {
		// Set explicitly: net/http would fall back to chunked encoding
		// for bodies over its buffer, and real servers send a length.
		out.header.Set("Content-Length", strconv.Itoa(len(out.body)))
	}
	h := w.Header()
	for k, vs := range out.header {
		h[k] = vs
	}
	s.update(x, func(x *Exchange) {
		x.Status, x.Header, x.Stream = out.status, out.header.Clone(), out.stream
	})
	if !out.stream {
		if !s.pause(ctx, resp.Delay) {
			s.finish(x, 0)
			return
		}
		w.WriteHeader(out.status)
		n, _ := w.Write(out.body)
		s.update(x, func(x *Exchange) { x.Body = append(x.Body, out.body[:n]...) })
		s.finish(x, 0)
		return
	}

	rc := http.NewResponseController(w)
	w.WriteHeader(out.status)
	if err := rc.Flush(); err != nil {
		s.finish(x, len(out.frames))
		return
	}
	errAt := -1
	if out.errs != nil {
		errAt = resp.ErrorAfter
		if last := len(out.frames) - 1; out.repeat == nil && errAt > last {
			// Past the end: the error takes [DONE]'s place.
			errAt = last
		}
	}
	delay := resp.Delay
	if out.repeat != nil && delay == 0 {
		delay = neverEndMinDelay
	}
	for i := 0; ; i++ {
		var ev []byte
		switch {
		case i == errAt:
			for _, e := range out.errs {
				if !s.send(w, rc, x, e) {
					return
				}
			}
			s.finish(x, s.remaining(out, i))
			return
		case i < len(out.frames):
			ev = out.frames[i]
		case out.repeat != nil:
			ev = out.repeat[(i-len(out.frames))%len(out.repeat)]
		default:
			s.finish(x, 0)
			return
		}
		if i > 0 && !s.pause(ctx, delay) {
			s.closed(x, s.remaining(out, i))
			return
		}
		if !s.send(w, rc, x, ev) {
			s.closed(x, s.remaining(out, i))
			return
		}
	}
}

func (s *Server) remaining(out *rendered, i int) int {
	if out.repeat != nil {
		return -1
	}
	return max(len(out.frames)-i, 0)
}

// send writes and flushes one event, recording the bytes that went out.
func (s *Server) send(w http.ResponseWriter, rc *http.ResponseController, x *Exchange, ev []byte) bool {
	n, err := w.Write(ev)
	if err == nil {
		err = rc.Flush()
	}
	s.update(x, func(x *Exchange) {
		x.Body = append(x.Body, ev[:n]...)
		if err == nil {
			x.Events++
		}
	})
	return err == nil
}

// pause waits d; it reports false when the peer or the server went away.
func (s *Server) pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil && s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.ctx.Done():
		return false
	}
}

// closed records a stream that ended because its peer (or the server) went
// away. net/http cancels the request context as soon as its background read
// sees the peer's FIN, so ClosedAt is when the close reached the fake.
func (s *Server) closed(x *Exchange, unsent int) {
	now := time.Now()
	s.update(x, func(x *Exchange) {
		x.PeerClosed = s.ctx.Err() == nil
		x.ClosedAt = now
		x.Unsent = unsent
		x.Done = true
		x.Finished = now
	})
}

func (s *Server) finish(x *Exchange, unsent int) {
	now := time.Now()
	s.update(x, func(x *Exchange) {
		x.Unsent = unsent
		x.Done = true
		x.Finished = now
	})
}

// modelsBody is GET /v1/models; clients probe it at start-up.
var modelsBody = []byte(`{"object":"list","data":[{"id":"` + DefaultModel + `","object":"model","created":` +
	strconv.Itoa(DefaultCreated) + `,"owned_by":"fakellm"}]}`)

func jsonAnswer(body []byte) *rendered {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &rendered{status: http.StatusOK, header: h, body: body}
}

func exhausted() *rendered {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &rendered{status: http.StatusInternalServerError, header: h,
		body: []byte(`{"error":{"message":"fakellm: script exhausted","type":"server_error","param":null,"code":null}}`)}
}

// embeddings answers one 3-dimensional vector per input.
func embeddings(req *Request) []byte {
	n := 1
	if in := gjson.GetBytes(req.Body, "input"); in.IsArray() {
		n = len(in.Array())
	}
	model := req.Model
	if model == "" {
		model = DefaultModel
	}
	b := []byte(`{"object":"list","data":[`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"object":"embedding","index":`+strconv.Itoa(i)+`,"embedding":[0.1,-0.2,0.3]}`...)
	}
	b = appendString(append(b, `],"model":`...), model)
	tokens := strconv.Itoa(len(req.Body)/4 + 1)
	return append(b, `,"usage":{"prompt_tokens":`+tokens+`,"total_tokens":`+tokens+`}}`...)
}

// echo answers any other path with the request body and, in headers, what
// was asked, so pass-through routes can be checked end to end.
func echo(req *Request) *rendered {
	h := http.Header{}
	ct := req.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	h.Set("X-Fake-Method", req.Method)
	h.Set("X-Fake-Path", req.Path)
	h.Set("X-Fake-Query", req.RawQuery)
	return &rendered{status: http.StatusOK, header: h, body: req.Body}
}

// API is the wire API whose path the request was sent to, as the registry
// matches client paths (internal/wireapi), "" for any other path. Paths
// that an upstream URL rewrote (ChatGPT's /backend-api/codex/responses)
// are no client's: the Responses and Anthropic rules match them by their
// last segment.
func (r *Request) API() wireapi.Name {
	if m := wireapi.Match(r.Path); m.API != nil {
		return m.API.Name
	}
	return ""
}
