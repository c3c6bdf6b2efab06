package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// panicking wraps an observer and panics, as a bug would, in one of its
// calls: header, finish, or event on the first event whose data holds marker
// (before the wrapped observer sees it, so what it held is intact).
type panicking struct {
	responseObserver
	in     string
	marker string
}

func (p *panicking) header(status int, h *fasthttp.ResponseHeader) {
	if p.in == "header" {
		panic("observer bug in header")
	}
	p.responseObserver.header(status, h)
}

func (p *panicking) event(ev *sse.Event, out []byte) ([]byte, bool) {
	if p.in == "event" && bytes.Contains(ev.Data, []byte(p.marker)) {
		panic("observer bug in event")
	}
	return p.responseObserver.event(ev, out)
}

func (p *panicking) finish(cause error, info *observe.ResponseInfo) {
	if p.in == "finish" {
		panic("observer bug in finish")
	}
	p.responseObserver.finish(cause, info)
}

// syncBuffer is a log sink safe for the stream writer's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// observedProxy serves srv.forward with the observer that observer builds
// for each request (and /metrics), on a loopback port.
func observedProxy(t *testing.T, cfg Config, log zerolog.Logger, observer func(*Server) responseObserver) (*Server, string) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	// The server's own fasthttp.Server, whose settings a stream's
	// connection depends on (streambody.go), with the handler replaced.
	srv.http.Handler = func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/metrics" {
			srv.handle(ctx)
			return
		}
		srv.forward(ctx, ctx.PostBody(), observer(srv))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-done
	})
	return srv, "http://" + ln.Addr().String()
}

// TestStreamObserverPanicFailsOpen: a panic anywhere in the stream's
// observer (a detector, sse/'s accumulators, the observer itself) costs the
// client no byte: it gets the upstream's stream exactly, what the observer
// held back included; the failure is counted and logged once, without
// content, and the proxy keeps serving.
func TestStreamObserverPanicFailsOpen(t *testing.T) {
	apis := map[*wireAPI]string{}
	for _, a := range streamAPIs(t) {
		switch a.name {
		case "chat":
			apis[chatAPI] = a.healthy
		case "responses":
			apis[responsesAPI] = a.healthy
		case "anthropic":
			apis[anthropicAPI] = a.healthy
		}
	}
	// brokenDetector makes the text detector of choice 0 panic on its first
	// byte, as a detector bug would: a zero Degeneration has no ring buffer.
	brokenDetector := func(o *answerObserver) responseObserver {
		o.watch.content[0] = &inspect.Degeneration{}
		return o
	}
	tests := []struct {
		name       string
		api        *wireAPI
		trim, hold bool
		wrap       func(*answerObserver) responseObserver
	}{
		{"chat detector", chatAPI, false, false, brokenDetector},
		{"chat detector with trim holding events", chatAPI, true, false, brokenDetector},
		{"responses detector", responsesAPI, false, false, brokenDetector},
		{"anthropic detector", anthropicAPI, false, false, brokenDetector},
		{"observer event with trim holding events", chatAPI, true, false, func(o *answerObserver) responseObserver {
			return &panicking{responseObserver: o, in: "event", marker: `"finish_reason":"tool_calls"`}
		}},
		{"observer event with tool calls held", chatAPI, false, true, func(o *answerObserver) responseObserver {
			// A terminal call of another command: the stream's call is held
			// until it completes.
			o.holdCalls([]terminalCall{{key: 1}})
			return &panicking{responseObserver: o, in: "event", marker: `"finish_reason":"tool_calls"`}
		}},
		{"observer header", chatAPI, false, false, func(o *answerObserver) responseObserver {
			return &panicking{responseObserver: o, in: "header"}
		}},
		{"observer finish", chatAPI, false, false, func(o *answerObserver) responseObserver {
			return &panicking{responseObserver: o, in: "finish"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := apis[tt.api]
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				serveStream(w, r, stream, endEOF)
			})
			cfg := DefaultConfig()
			cfg.Upstream.URL = up.URL
			cfg.Stream.HoldToolCalls = tt.hold
			if tt.trim {
				cfg.Stream.Tail = TailTrim
			}
			var logs syncBuffer
			var served atomic.Int32
			_, base := observedProxy(t, cfg, zerolog.New(&logs), func(s *Server) responseObserver {
				o := newAnswerObserver(s.pipeline, &plan{api: tt.api, requestFacts: requestFacts{stream: true}}, nil)
				if served.Add(1) > 1 {
					return o // the request after: a healthy observer
				}
				return tt.wrap(o)
			})
			for i := range 2 {
				_, got := post(t, base+"/v1/chat/completions", "", `{"stream":true}`)
				if got != stream {
					t.Fatalf("request %d: client got %d bytes, differing from the upstream's %d from byte %d on: %q",
						i, len(got), len(stream), diffAt(got, stream), got[diffAt(got, stream):])
				}
			}
			if n := strings.Count(logs.String(), `"stage":"stream"`); n != 1 {
				t.Errorf("%d fail-open log lines; want 1:\n%s", n, logs.String())
			}
			if strings.Contains(logs.String(), "Makefile") {
				t.Errorf("the log quotes the answer: %s", logs.String())
			}
			resp, err := newClient().Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := `loopguard_fail_open_total{stage="stream"} 1`; !strings.Contains(string(metrics), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		})
	}
}

// failingReader returns head, then panics, as a bug below the SSE reader
// would.
type failingReader struct{ head []byte }

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.head) == 0 {
		panic(errors.New("reader bug"))
	}
	n := copy(p, f.head)
	f.head = f.head[n:]
	return n, nil
}

// TestStreamRelayReaderPanic: a panic while parsing leaves the bytes read so
// far for the raw pass-through and counts once.
func TestStreamRelayReaderPanic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Upstream.URL = "http://127.0.0.1:1"
	srv, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	const head = "data: {\"i\":0}\n\ndata: {\"i\""
	rl := streamRelay{s: srv, rd: sse.NewReader(&failingReader{head: []byte(head)}, 0)}
	err = rl.next()
	if string(rl.ev.Raw) != "data: {\"i\":0}\n\n" || err != nil {
		t.Fatalf("first event = %q, %v; want the whole first event", rl.ev.Raw, err)
	}
	err = rl.next()
	if len(rl.ev.Raw) != 0 || err != nil || !rl.raw {
		t.Fatalf("after the panic: event %q, err %v, raw %v; want no event, no error, raw", rl.ev.Raw, err, rl.raw)
	}
	if b := rl.buffered(); string(b) != "data: {\"i\"" {
		t.Errorf("buffered = %q; want the unfinished event's bytes", b)
	}
}

// panickingStore is a session store whose every call panics, as a bug in
// a store would.
type panickingStore struct{}

func (panickingStore) Load(context.Context, string) (policy.State, error) { panic("store bug") }
func (panickingStore) Update(context.Context, string, func(*policy.State) error) (policy.State, error) {
	panic("store bug")
}

// TestDecidePanicFailsOpen: a panic while deciding sends the request's own
// body upstream undecided, and keeps what was read of the request (its
// session, whether and how it streams, its model), by which the answer is
// still read.
func TestDecidePanicFailsOpen(t *testing.T) {
	p := testPipeline(t)
	p.policy = policy.New(p.policy.Config(), panickingStore{}, zerolog.Nop())
	body := []byte(`{"model":"m-1","stream":true,"stream_options":{"include_usage":true},"max_tokens":77,` +
		`"messages":[{"role":"user","content":"hi"}]}`)
	pl := p.decideFor([]byte("sess-1"), nil, chatAPI, body)
	if pl.failOpen != "panic" || pl.decision.Action != policy.None || string(pl.body) != string(body) || pl.answer != nil {
		t.Fatalf("plan after a panic: fail open %q, action %v, answer %v, body changed %v; want the request passed through undecided",
			pl.failOpen, pl.decision.Action, pl.answer, string(pl.body) != string(body))
	}
	want := requestFacts{key: pl.key, stream: true, usage: true, maxTok: 77, completionTokens: -1, model: "m-1"}
	if pl.key == "" || pl.requestFacts != want {
		t.Errorf("request facts after a panic: %+v; want %+v", pl.requestFacts, want)
	}
}
