package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/proxy"
)

// Options configures Run and Serve. The zero value prints plain text and
// discards the proxy's logs.
type Options struct {
	// Color adds ANSI colours to the transcript. Set it only when the output
	// is a terminal.
	Color bool
	// Log receives the proxy's own log lines in console format; nil
	// discards them.
	Log io.Writer
}

// shutdownGrace bounds the proxy's and the model's shutdown; the demo's
// answers are short, so anything still running after it is stuck.
const shutdownGrace = 5 * time.Second

// eventWait bounds the wait for the proxy's ChatDone hook after the client
// has its answer (the hook runs once the answer has ended, which may be a
// moment after the client read it).
const eventWait = 5 * time.Second

// event is the part of a proxy.ChatEvent the transcript shows, copied out
// because the hook's event must not be retained.
type event struct {
	Session     string
	Action      policy.Action
	Category    inspect.Category
	Confidence  float64
	Brief       string
	Summary     string
	Collapse    bool
	Reapplied   bool
	Constraints int
	Terminated  bool
	FailOpen    string
	Cut         inspect.Category
	CutOffset   int64
	TokensSaved int
	ReportedCut bool // this request carried the notice of an earlier cut
}

func newEvent(ev *proxy.ChatEvent) event {
	d := ev.Decision
	e := event{
		Session:     strings.Clone(ev.Session),
		Action:      d.Action,
		Category:    d.Verdict.Category,
		Confidence:  d.Verdict.Confidence,
		Brief:       strings.Clone(d.Brief),
		Summary:     strings.Clone(d.Verdict.Summary()),
		Collapse:    d.Collapse,
		Reapplied:   d.Reapplied,
		Constraints: len(d.Constraints),
		Terminated:  ev.Terminated,
		FailOpen:    ev.FailOpen,
		CutOffset:   ev.CutOffset,
		TokensSaved: ev.TokensSaved,
		ReportedCut: d.Cut != nil,
	}
	if !d.Verdict.Loop {
		e.Category, e.Confidence, e.Summary = "", 0, ""
	}
	if ev.Cut != nil {
		e.Cut = ev.Cut.Category
	}
	return e
}

// env is one scripted model and one proxy in front of it, on loopback.
type env struct {
	fake      *fakellm.Server
	fakeDone  chan error
	srv       *proxy.Server
	srvDone   chan error
	proxyURL  string // base URL of the proxy, with /v1
	transport *http.Transport
	client    *http.Client
}

// start runs the scripted model on a free loopback port and the proxy on ln
// (a free loopback port when nil). hook gets every chat event.
func start(ln net.Listener, opts Options, hook func(event)) (_ *env, err error) {
	fakeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the scripted model: %w", err)
	}
	e := &env{fake: fakellm.New(Script()), fakeDone: make(chan error, 1)}
	go func() { e.fakeDone <- e.fake.Serve(fakeLn) }()
	defer func() {
		if err != nil {
			_ = e.fake.Close()
			<-e.fakeDone
		}
	}()

	cfg := proxy.DefaultConfig()
	cfg.Upstream.URL = "http://" + fakeLn.Addr().String()
	cfg.Server.ShutdownGrace = shutdownGrace
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	srv, err := proxy.New(cfg, logger(opts.Log), proxy.WithChatDone(func(ev *proxy.ChatEvent) {
		hook(newEvent(ev))
	}))
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("listen for the proxy: %w", err)
		}
	}
	e.srv, e.srvDone = srv, make(chan error, 1)
	go func() { e.srvDone <- srv.Serve(ln) }()
	e.proxyURL = "http://" + ln.Addr().String() + "/v1"
	// The agents' own transport, so that close can drop its idle
	// keep-alive connections and leave no goroutine behind.
	e.transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}
	e.client = &http.Client{Transport: e.transport, Timeout: 30 * time.Second}
	if err := e.ready(); err != nil {
		_ = e.close()
		return nil, err
	}
	return e, nil
}

// readyWait bounds the wait for the proxy's first answer on loopback.
const readyWait = 5 * time.Second

// ready waits until the proxy answers /healthz. Besides telling the user a
// working address, it guarantees that Serve is running before anyone can
// call close: fasthttp's Shutdown does not stop a Serve that starts after
// it, which would leave close waiting for ever.
func (e *env) ready() error {
	url := strings.TrimSuffix(e.proxyURL, "/v1") + "/healthz"
	deadline := time.Now().Add(readyWait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		resp, err := e.client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proxy not ready after %v: %w", readyWait, err)
		}
		time.Sleep(pause)
	}
}

// close stops the proxy, letting running answers finish, then the model.
func (e *env) close() error {
	e.transport.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	errs := []error{e.srv.Shutdown(ctx), <-e.srvDone, e.fake.Close(), <-e.fakeDone}
	return errors.Join(errs...)
}

// upstreamCount is the number of requests the model has received.
func (e *env) upstreamCount() int { return len(e.fake.Requests()) }

// upstreamRequest is the n-th request the model received, if there is one.
func (e *env) upstreamRequest(n int) ([]byte, bool) {
	reqs := e.fake.Requests()
	if n < 0 || n >= len(reqs) {
		return nil, false
	}
	return reqs[n].Body, true
}

func logger(w io.Writer) zerolog.Logger {
	if w == nil {
		return zerolog.Nop()
	}
	// The proxy logs from many goroutines; w (a buffer in tests) need not
	// be safe for concurrent writes.
	return zerolog.New(zerolog.ConsoleWriter{Out: zerolog.SyncWriter(w), TimeFormat: time.TimeOnly}).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
}
