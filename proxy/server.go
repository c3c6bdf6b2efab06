package proxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/judge"
	"github.com/loopguard/loopguard/observe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Server is a running loopguard proxy. Create it with New, start it with
// Serve, stop it with Shutdown.
type Server struct {
	cfg Config
	log zerolog.Logger
	up  *upstream
	// wires serve the traffic of the wires (internal/wireapi) whose
	// upstream the configuration names (upstream.urls,
	// upstream.anthropic_url), at the wire's index in wireapi.Wires; nil
	// for the others, which up serves.
	wires    [len(wireapi.Wires)]*upstream
	http     *fasthttp.Server
	pipeline *pipeline
	// chatDone, when set, sees every chat request's outcome (WithChatDone).
	chatDone func(*ChatEvent)
	// judgeDone, when set, sees every judge check's outcome (WithJudgeDone).
	judgeDone func(judge.Result)
	// resume stops cut resumable streams upstream (resumable.go).
	resume resumeStopper
	// icpt serves intercepted connections (WithInterception); nil when
	// there are none.
	icpt *interception

	obs     *observe.Observer
	metrics fasthttp.RequestHandler // GET /metrics, under the admin API's access rule
	admin   fasthttp.RequestHandler // /loopguard/: admin API and dashboard (and profiles: withPprof)
	// cluster shares the admin view with the other replicas; nil unless
	// the store is shared.
	cluster *observe.Cluster

	// clients are the client connections open (accept.go).
	clients connSet
	// sockets are the Responses WebSockets open (socket.go).
	sockets sockets

	mu        sync.Mutex
	listeners []net.Listener // given to Serve, closed by Shutdown
	closed    bool           // Shutdown was called
	// handedOver counts the streams, whose connections fasthttp handed
	// over (setStreamWriter) and no longer waits for.
	handedOver sync.WaitGroup
	// peers notices clients that leave while their answer is prepared or
	// streamed (clientwatch_linux.go).
	peers peerWatcher
	// bodies bounds the memory of request bodies in flight (budget.go).
	bodies bodyBudget
	// passthrough are the paths [upstream] api_key serves (passthrough.go).
	passthrough pathSet
	// stopping is cancelled (stop) when Shutdown begins: the admin
	// handlers' request context (withLocalAddr).
	stopping context.Context
	stop     context.CancelFunc
}

// serverWriteBuf is the server's write buffer, one per connection.
const serverWriteBuf = 2 << 10

// New builds a proxy for cfg, which must have passed Validate. Nothing listens
// until Serve is called.
func New(cfg Config, log zerolog.Logger, opts ...Option) (*Server, error) {
	up, err := newUpstream(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, up: up, bodies: bodyBudget{limit: cfg.Server.MaxBodyMemory},
		passthrough: newPathSet(cfg.Upstream.Passthrough)}
	for i := range wireapi.Wires {
		if u := cfg.Upstream.WireURL(wireapi.Wires[i].Name); u != "" {
			c := cfg.Upstream
			c.URL = u
			if s.wires[i], err = newUpstream(c); err != nil {
				return nil, err
			}
		}
	}
	for _, o := range opts {
		o(s)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.obs, err = observe.New(reg, log, observe.Options{MaxSessions: cfg.Policy.MaxSessions, LogContent: cfg.Log.Content,
		Replica: replicaName(cfg)})
	if err != nil {
		return nil, err
	}
	s.pipeline, err = newPipeline(cfg, log, s.obs)
	if err != nil {
		return nil, err
	}
	s.pipeline.chatEvents = s.chatDone != nil
	s.pipeline.judgeDone = s.judgeDone
	admin, err := observe.NewAdmin(s.obs.Recorder(), observe.AdminOptions{
		Token:   cfg.Admin.Token,
		Control: s.pipeline.policy,
		States:  s.pipeline.policy.Store(),
		Config:  cfg,
	})
	if err != nil {
		return nil, err
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.admin = withLocalAddr(admin, s.stopping)
	if cfg.Admin.Pprof {
		s.admin = withPprof(s.admin, admin.Guard, s.stopping)
	}
	s.metrics = withLocalAddr(admin.Guard(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), s.stopping)
	s.http = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleServerError,
		HeaderReceived:     s.headerReceived,
		Name:               "",
		MaxRequestBodySize: cfg.Server.MaxBodyBytes,
		ReadTimeout:        cfg.Server.ReadTimeout,
		IdleTimeout:        cfg.Server.IdleTimeout,
		// WriteTimeout stays 0: it is one deadline for the whole response and
		// would cut long streams (docs/streams.md: fasthttp as the
		// server).
		// The read buffer bounds the request headers; 16 KiB holds any API
		// client's and keeps an idle open stream cheap (it is held per
		// connection).
		ReadBufferSize: 16 << 10,
		// The write buffer serves answers that are not streams (a stream
		// writes its socket itself, streambody.go): 2 KiB, held only while
		// a response is written.
		WriteBufferSize:       serverWriteBuf,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		ReduceMemoryUsage:     true,
		// A stream's connection goes back to fasthttp after the stream
		// (setStreamWriter): whoever takes a connection over closes it.
		KeepHijackedConns: true,
		Logger:            fasthttpLogger{log},
	}
	// A store that replicas share also carries their common admin view.
	if feed, ok := s.pipeline.policy.Store().(observe.SharedFeed); ok {
		s.cluster = observe.StartCluster(s.obs.Recorder(), feed, log, 0)
	}
	return s, nil
}

// replicaName is [admin] replica, else the host name and the listen port.
func replicaName(cfg Config) string {
	if cfg.Admin.Replica != "" {
		return cfg.Admin.Replica
	}
	host, _ := os.Hostname()
	_, port, _ := net.SplitHostPort(cfg.Server.Listen)
	return net.JoinHostPort(host, port)
}

// withLocalAddr adapts h, an admin handler, to fasthttp. Admin handlers
// answer without a token only on loopback listeners; they read the
// listener's address from the request context, where net/http puts it.
//
// The request's context is not the adaptor's, the fasthttp RequestCtx:
// its Done reads a field of the fasthttp.Server that ShutdownWithContext
// writes without synchronisation (fasthttp v1.74), and the adaptor runs h
// on a goroutine of its own that can outlive the connection (the live
// feed). h's context keeps the RequestCtx's values, and is cancelled when
// the Server begins to shut down (stopping), all that the RequestCtx's
// cancellation ever said.
func withLocalAddr(h http.Handler, stopping context.Context) fasthttp.RequestHandler {
	adapted := fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetUserValue(http.LocalAddrContextKey, ctx.LocalAddr())
		adapted(ctx)
	}
}

// Recorder returns the session record that the admin API serves, for a
// process that runs the proxy in-process (`loopguard run`).
func (s *Server) Recorder() *observe.Recorder { return s.obs.Recorder() }

// Serve accepts connections on ln until Shutdown. It returns nil after a
// clean shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.listeners = append(s.listeners, ln)
	s.mu.Unlock()
	err := s.http.Serve(&acceptor{Listener: ln, conns: &s.clients, sendTimeout: s.cfg.Server.SendTimeout, log: s.log,
		budget: &s.bodies, pace: bodyPace{timeout: s.cfg.Server.BodyTimeout, rate: s.cfg.Server.MinBodyRate}})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for running requests and
// streams to finish, until ctx ends. It then releases the session store.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	s.clients.closeResumed()
	s.mu.Lock()
	s.closed = true
	for _, ln := range s.listeners {
		// fasthttp closes only the listeners its Serve has registered; one
		// handed to Serve a moment ago may not be yet, and would be served
		// forever.
		_ = ln.Close()
	}
	s.mu.Unlock()
	err := s.http.ShutdownWithContext(ctx)
	if errors.Is(err, net.ErrClosed) {
		err = nil // the listeners closed above
	}
	if werr := waitCtx(ctx, &s.handedOver); err == nil {
		err = werr
	}
	if werr := s.sockets.close(ctx); err == nil {
		err = werr
	}
	s.resume.running.Wait() // DELETEs of cut streams, bounded by stopTimeout
	s.peers.close()
	s.up.client.CloseIdleConnections()
	s.icpt.closeIdle()
	for _, up := range s.wires {
		if up != nil {
			up.client.CloseIdleConnections()
		}
	}
	if s.cluster != nil {
		s.cluster.Close() // before the store it writes to
	}
	if cerr := s.pipeline.Close(); err == nil {
		err = cerr
	}
	return err
}

// waitCtx waits for wg until ctx ends; the goroutine that waits ends with
// wg.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handle routes one request: loopguard's own endpoints, chat completions
// through the pipeline, everything else straight to the upstream. A
// /s/<id>/ session prefix is taken off first, whatever the path.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	if cc, ok := ctx.Conn().(*clientConn); ok {
		cc.endBody()
		defer cc.share.giveBack()
	}
	if ambiguousFraming(&ctx.Request.Header) {
		// RFC 9112 section 6.3: Content-Length beside Transfer-Encoding is
		// how requests are smuggled past a proxy that frames them otherwise
		// than the server behind it. Refuse, and close the connection so the
		// bytes after the body are never read as a request.
		writeError(ctx, fasthttp.StatusBadRequest, "request has both Content-Length and Transfer-Encoding",
			"invalid_request_error", "bad_request")
		ctx.SetConnectionClose()
		return
	}
	host := interceptedHost(ctx)
	if host != "" {
		// Every path of an intercepted host is the host's, /s/ and
		// /loopguard/ too; its requests are the run's session.
		if s.hostUpstream(host) == nil {
			writeError(ctx, fasthttp.StatusBadGateway, "loopguard: no upstream for "+host, "upstream_error", "upstream_error")
			return
		}
		ctx.SetUserValue(sessionIDKey, s.icpt.session)
	} else if !stripSessionPrefix(ctx) {
		return
	}
	if !cleanRequestPath(ctx) {
		return
	}
	path := ctx.Path()
	switch {
	case host == "" && s.serveOwn(ctx, path):
	case host == "" && s.refuseUnkeyed(ctx):
	case isSocketUpgrade(ctx):
		s.serveSocket(ctx)
	case ctx.IsPost() && guardedAPI(path) != nil:
		s.pipeline.guard(ctx, s, guardedRequest(ctx))
	case isResume(ctx):
		// A resumed stream is a chat answer like the first delivery.
		s.pipeline.serveResume(ctx, s)
	default:
		s.forward(ctx, ctx.Request.Body(), nil)
	}
}

// serveOwn serves loopguard's own endpoints, and reports whether path is
// one.
func (s *Server) serveOwn(ctx *fasthttp.RequestCtx, path []byte) bool {
	switch {
	case string(path) == "/healthz":
		writeJSON(ctx, fasthttp.StatusOK, []byte(`{"status":"ok"}`))
	case string(path) == "/readyz":
		s.ready(ctx)
	case string(path) == "/metrics":
		s.metrics(ctx)
	case string(path) == "/loopguard" || hasPrefixBytes(path, "/loopguard/"):
		s.admin(ctx)
	default:
		return false
	}
	return true
}

// guardedAPI returns the flow of the API whose path p is, as the registry
// matches paths (internal/wireapi: /v1/chat/completions,
// /openai/v1/responses, /anthropic/v1/messages...), and nil for everything
// else, which passes through.
func guardedAPI(p []byte) *wireAPI {
	if r := wireapi.Match(p); r.API != nil {
		return wireAPIs[r.API.Index()]
	}
	return nil
}

// ambiguousFraming reports a request that carried both Content-Length and
// Transfer-Encoding. fasthttp frames it by Transfer-Encoding and keeps
// neither in the parsed header, so the raw header lines are read.
func ambiguousFraming(h *fasthttp.RequestHeader) bool {
	var length, transfer bool
	for raw := h.RawHeaders(); len(raw) > 0; {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte{'\n'})
		name, _, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch name = bytes.TrimSpace(name); {
		case asciiEqualFold(name, fasthttp.HeaderContentLength):
			length = true
		case asciiEqualFold(name, fasthttp.HeaderTransferEncoding):
			transfer = true
		}
	}
	return length && transfer
}

// upstreamFor is the upstream of one request: its wire's when the
// configuration names one (upstream.urls, upstream.anthropic_url),
// upstream.url's otherwise. The wire is the one whose header the request
// carries or whose prefix its path has (Anthropic clients send
// anthropic-version on every request, which also routes the paths beside
// /v1/messages: count_tokens, models), else its API's (internal/wireapi).
// An intercepted connection's requests go to the host it was meant for.
func (s *Server) upstreamFor(ctx *fasthttp.RequestCtx) *upstream {
	if host := interceptedHost(ctx); host != "" {
		return s.hostUpstream(host)
	}
	w := wireapi.WireOf(ctx.Path(), func(name string) bool { return len(ctx.Request.Header.Peek(name)) > 0 })
	if w == nil {
		r := wireapi.Match(ctx.Path())
		if r.API == nil {
			return s.up
		}
		w = wireapi.LookupWire(r.API.Wire)
	}
	if up := s.wires[w.Index()]; up != nil {
		return up
	}
	return s.up
}

// ready answers 200 when the upstream accepts a TCP connection.
func (s *Server) ready(ctx *fasthttp.RequestCtx) {
	timeout := s.cfg.Upstream.ConnectTimeout
	if timeout <= 0 || timeout > 2*time.Second {
		timeout = 2 * time.Second
	}
	c, err := net.DialTimeout("tcp", s.up.addr, timeout)
	if err != nil {
		writeError(ctx, fasthttp.StatusServiceUnavailable, "upstream unreachable", "upstream_error", "upstream_unreachable")
		return
	}
	_ = c.Close()
	writeJSON(ctx, fasthttp.StatusOK, []byte(`{"status":"ready"}`))
}

// handleServerError answers what fasthttp refuses before our handler runs.
// fasthttp closes the connection after the answer; one whose body is
// refused unread lingers first, so that the client reads the answer.
func (s *Server) handleServerError(ctx *fasthttp.RequestCtx, err error) {
	cc, _ := ctx.Conn().(*clientConn)
	if cc != nil {
		cc.endBody()
		cc.share.giveBack() // the body's read failed
		if cc.refused {
			cc.refused = false
			cc.lingering.Store(true)
			writeBodyMemoryError(ctx)
			return
		}
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		if cc != nil {
			cc.lingering.Store(true)
		}
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "request body exceeds server.max_body_bytes", "invalid_request_error", "request_too_large")
		return
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		writeError(ctx, fasthttp.StatusRequestTimeout, "timed out reading the request", "invalid_request_error", "request_timeout")
		return
	}
	writeError(ctx, fasthttp.StatusBadRequest, "cannot parse the request", "invalid_request_error", "bad_request")
}

// writeBodyMemoryError answers a request whose body, or its decoding, does
// not fit in server.max_body_memory beside those in flight.
func writeBodyMemoryError(ctx *fasthttp.RequestCtx) {
	writeError(ctx, fasthttp.StatusServiceUnavailable,
		"loopguard: too many request bodies in flight (server.max_body_memory); retry shortly",
		"server_error", "body_memory_exhausted")
	ctx.Response.Header.Set("Retry-After", "1")
}

type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug().Msgf(format, args...)
}
