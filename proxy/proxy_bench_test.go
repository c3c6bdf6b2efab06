package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/internal/redistest"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// streamEvents is the length of the benchmark stream: a long healthy answer.
const streamEvents = 2000

// benchUpstream serves a fixed JSON answer and a 500-event SSE stream on loopback.
func benchUpstream(b testing.TB) string {
	b.Helper()
	var stream strings.Builder
	for i := 0; i < streamEvents; i++ {
		fmt.Fprintf(&stream, `data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"word%d "},"finish_reason":null}]}`+"\n\n", i)
	}
	stream.WriteString("data: [DONE]\n\n")
	sse := []byte(stream.String())
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if strings.Contains(string(ctx.Path()), "stream") || gjsonStream(ctx.Request.Body()) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBody(sse)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(chatAnswer)
	}}
	return serveLoopback(b, srv)
}

// serveLoopback serves srv on a free loopback port until the test ends and
// returns its URL.
func serveLoopback(tb testing.TB, srv *fasthttp.Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func gjsonStream(body []byte) bool { return bytes.Contains(body, []byte(`"stream":true`)) }

// chatBody is a chat request of about size bytes: a short agent session.
func chatBody(size int, stream bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":"m","stream":%v,"messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"Fix the failing test."}`, stream)
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Looking at file %d.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/file%d.go\"}"}}]}`, i, i, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":%q}`, i, strings.Repeat(fmt.Sprintf("line %d of file %d\n", i, i), 20))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func benchProxy(b *testing.B, path string, body []byte) {
	benchProxyWith(b, path, body, nil)
}

// benchProxyWith is benchProxy with mutate applied to the proxy's config.
func benchProxyWith(b *testing.B, path string, body []byte, mutate func(*Config)) {
	up := benchUpstream(b)
	_, base := startProxy(b, func(c *Config) {
		c.Upstream.URL = up
		c.Log.Level = "error"
		if mutate != nil {
			mutate(c)
		}
	})
	benchClient(b, base, path, body)
}

// benchClient sends body to base+path from GOMAXPROCS clients until b.N requests
// are answered, and reports the process's CPU time per request (cpu-ns/op:
// the client's, the proxy's and the upstream's together, steadier than
// ns/op on a shared machine).
func benchClient(b *testing.B, base, path string, body []byte) {
	client := &fasthttp.HostClient{Addr: strings.TrimPrefix(base, "http://"), StreamResponseBody: false, MaxConns: 64}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			postOK(b, client, req, resp, base+path, body)
		}
	})
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// postOK sends body to url with req and resp and fails tb unless the answer
// is a 200.
func postOK(tb testing.TB, c *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, url string, body []byte) {
	req.SetRequestURI(url)
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.SetBody(body)
	if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		tb.Fatalf("Do: %v %d", err, resp.StatusCode())
	}
}

// BenchmarkForward is plain forwarding of a 20 KB non-chat request.
func BenchmarkForward20KB(b *testing.B) { benchProxy(b, "/v1/embeddings", chatBody(20<<10, false)) }

// BenchmarkChat20KB is a 20 KB chat request through the whole pipeline
// (session key, trajectory, detectors, policy) with a non-streamed answer.
func BenchmarkChat20KB(b *testing.B) { benchProxy(b, "/v1/chat/completions", chatBody(20<<10, false)) }

// BenchmarkPassThrough is what loopguard costs where it inspects nothing,
// by request size: a path it passes through (relay), a chat request in
// policy mode off, and, as the floor, a bare fasthttp proxy (fasthttp's
// server and HostClient.Do, nothing of ours) in front of the same
// upstream.
func BenchmarkPassThrough(b *testing.B) {
	for _, size := range []int{27 << 10, 276 << 10} {
		body := chatBody(size, false)
		b.Run(fmt.Sprintf("bare-fasthttp/%dKB", size>>10), func(b *testing.B) {
			benchClient(b, bareProxy(b, benchUpstream(b)), "/v1/chat/completions", body)
		})
		b.Run(fmt.Sprintf("relay/%dKB", size>>10), func(b *testing.B) { benchProxy(b, "/v1/embeddings", body) })
		b.Run(fmt.Sprintf("mode-off/%dKB", size>>10), func(b *testing.B) {
			benchProxyWith(b, "/v1/chat/completions", body, func(c *Config) { c.Policy.Mode = policy.ModeOff })
		})
	}
}

// bareProxy serves the smallest fasthttp reverse proxy in front of
// upstream and returns its URL.
func bareProxy(b testing.TB, upstream string) string {
	hc := &fasthttp.HostClient{Addr: strings.TrimPrefix(upstream, "http://"), MaxConns: 64}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	}}
	return serveLoopback(b, srv)
}

// BenchmarkChatStream is a chat request answered by a streamEvents-event
// stream that the proxy parses and inspects event by event; compare it with
// BenchmarkForwardStream, the same stream relayed without inspection.
func BenchmarkChatStream(b *testing.B) {
	benchProxy(b, "/v1/chat/completions", chatBody(2<<10, true))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/streamEvents, "ns/event")
}

// BenchmarkForwardStream relays a streamEvents-event stream without inspection.
func BenchmarkForwardStream(b *testing.B) {
	benchProxy(b, "/v1/stream", chatBody(2<<10, false))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/streamEvents, "ns/event")
}

// BenchmarkCutLatency streams a degenerate answer at 100 events/s and
// reports the time from the upstream writing the event that made the
// detector sure to the upstream seeing its connection closed
// (ms-to-close), and how many degenerate bytes the client had received
// before the cut (bytes-to-detect).
func BenchmarkCutLatency(b *testing.B) {
	type result struct{ lastWrite, closed time.Time }
	results := make(chan result, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		var last time.Time
		for i := 0; i < 3000; i++ {
			_, err := fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"I will read the file again. "},"finish_reason":null}]}`+"\n\n")
			if err == nil {
				w.(http.Flusher).Flush()
				last = time.Now()
			}
			select {
			case <-r.Context().Done():
				results <- result{last, time.Now()}
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		results <- result{}
	}))
	defer up.Close()
	_, base := startProxy(b, func(c *Config) { c.Upstream.URL = up.URL; c.Log.Level = "error" })
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var total time.Duration
	var bytesToDetect int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := client.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := <-results
		if r.closed.IsZero() {
			b.Fatal("the stream was never cut")
		}
		total += r.closed.Sub(r.lastWrite)
		bytesToDetect = strings.Count(string(body), "I will read the file again. ") * len("I will read the file again. ")
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-close")
	b.ReportMetric(float64(bytesToDetect), "bytes-to-detect")
}

// BenchmarkResponsesRecord is the cost the server-side history record adds
// to a Responses request with previous_response_id: loading a full record
// (MaxRecordItems items) from the memory store, building the body to judge,
// and saving the extended record.
func BenchmarkResponsesRecord(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Upstream.URL = "http://127.0.0.1:1"
	p, err := newPipeline(cfg, zerolog.Nop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var items []string
	for i := 0; i < policy.MaxRecordItems/2; i++ {
		items = append(items,
			fmt.Sprintf(`{"type":"function_call","call_id":"call_%d","name":"bash","arguments":"{\"command\":\"go test ./pkg%d/...\"}"}`, i, i),
			fmt.Sprintf(`{"type":"function_call_output","call_id":"call_%d","output":%q}`, i, strings.Repeat("ok  \tpkg/sub\t0.01s\n", 20)))
	}
	ctx := context.Background()
	if err := p.policy.SaveRecord(ctx, policy.RecordKey("resp_0", ""), items); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"gpt-4.1","previous_response_id":"resp_0","input":[{"type":"function_call_output","call_id":"call_x","output":"done"}]}`)
	output := gjson.Parse(`[{"type":"function_call","call_id":"call_y","name":"bash","arguments":"{\"command\":\"ls\"}"}]`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var pl plan
		var judged []byte
		if judged, pl.record, _ = p.prepareRecord(ctx, body); len(judged) == len(body) {
			b.Fatal("record not used")
		}
		p.saveRecord(&pl, "resp_next", output)
	}
}

// BenchmarkObserveEvent is the inspection cost of one healthy content event
// of a chat stream, without the network: parsing the chunk, accumulating it,
// feeding the degeneration detector, forwarding its bytes to a buffer.
func BenchmarkObserveEvent(b *testing.B) {
	o, events := observerAndEvents(b)
	out := make([]byte, 0, 4096)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var stop bool
		if out, stop = o.event(&events[i%len(events)], out[:0]); stop {
			b.Fatal("a healthy stream was cut")
		}
	}
}

// BenchmarkObserveEventOpenStreams is BenchmarkObserveEvent with the
// events dealt round-robin to many open streams, each with its own
// observer, as a replica holding that many streams sees them: each event
// finds its stream's state (observer, accumulator, detector) gone from the
// cache since that stream's previous event. Each event is first copied to
// one buffer, as the relay's read leaves it. A stream ends after
// openStreamEvents events (the load test's length), and a new one takes its
// place.
func BenchmarkObserveEventOpenStreams(b *testing.B) {
	const openStreamEvents = 200
	for _, streams := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			p := testPipeline(b)
			events := proseEvents()
			obs := make([]*answerObserver, streams)
			next := make([]int, streams)
			for i := range obs {
				obs[i] = newAnswerObserver(p, &plan{api: chatAPI, requestFacts: requestFacts{stream: true}}, nil)
				next[i] = i * 7 % len(events)
			}
			seen := make([]int, streams)
			var ev sse.Event
			raw := make([]byte, 0, 1024)
			out := make([]byte, 0, 4096)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := 0; i < b.N; i++ {
				s := i % streams
				e := &events[next[s]]
				next[s] = (next[s] + 1) % len(events)
				raw = append(raw[:0], e.Raw...)
				ev.Raw, ev.Data = raw, raw[len(raw)-len(e.Data)-2:len(raw)-2]
				var stop bool
				if out, stop = obs[s].event(&ev, out[:0]); stop {
					b.Fatal("a healthy stream was cut")
				}
				if seen[s]++; seen[s] == openStreamEvents {
					obs[s].release()
					obs[s], seen[s] = newAnswerObserver(p, &plan{api: chatAPI, requestFacts: requestFacts{stream: true}}, nil), 0
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// testPipeline is a chat pipeline with the default configuration, closed
// when the test ends.
func testPipeline(tb testing.TB) *pipeline {
	cfg := DefaultConfig()
	cfg.Upstream.URL = "http://127.0.0.1:1"
	p, err := newPipeline(cfg, zerolog.Nop(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// observerAndEvents returns a chat observer past its first events and a
// stream of varied healthy prose chunks.
func observerAndEvents(tb testing.TB) (*answerObserver, []sse.Event) {
	p := testPipeline(tb)
	events := proseEvents()
	o := newAnswerObserver(p, &plan{api: chatAPI, requestFacts: requestFacts{stream: true}}, nil)
	for i := range 64 {
		o.event(&events[i], nil)
	}
	return o, events
}

// proseEvents is a stream of varied healthy prose chunks.
func proseEvents() []sse.Event {
	words := strings.Fields(`The proxy reads each event as it passes and forwards its bytes before it looks at
		them, so a healthy answer reaches the agent as fast as the model writes it while loopguard keeps count of what
		the model said and how often it said it, and only a long run of the same phrase ends the answer early.`)
	events := make([]sse.Event, 4096)
	for i := range events {
		data := fmt.Sprintf(`{"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"%s %d "},"finish_reason":null}]}`, words[i%len(words)], i)
		events[i] = sse.Event{Raw: []byte("data: " + data + "\n\n"), Data: []byte(data)}
	}
	return events
}

// BenchmarkDecideAndInject measures what the session adds to a 200-turn
// looping request once the detectors have run: the store lookup and
// update, the ladder, and the rewrite of the ~400 KB body (a warning
// inserted after the last tool result). Detection itself is
// inspect's BenchmarkParseInspect200.
func BenchmarkDecideAndInject(b *testing.B) {
	for _, store := range []string{"memory", "redis"} {
		b.Run(store, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Upstream.URL = "http://127.0.0.1:1"
			if store == "redis" {
				cfg.Policy.Store = policy.StoreRedis
				cfg.Policy.RedisURL = redistest.Start(b).URL(0)
			}
			p, err := newPipeline(cfg, zerolog.Nop(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			body := []byte(longLoopingHistory(200))
			traj, err := p.engine.Parse(body)
			if err != nil {
				b.Fatal(err)
			}
			v := p.engine.Inspect(traj)
			if !v.Loop {
				b.Fatal("the history does not loop")
			}
			ctx := context.Background()
			sessionKeys := make([]string, 64)
			for i := range sessionKeys {
				sessionKeys[i] = fmt.Sprintf("bench-%d", i)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// 64 sessions in turn: after the first round each request is
				// a retry that re-applies its warning, as agents retry.
				pl := plan{api: chatAPI, requestFacts: requestFacts{key: sessionKeys[i%len(sessionKeys)], model: "m"}, layout: traj.Layout}
				d, err := p.policy.Decide(ctx, pl.key, v, traj, policy.ModeEnforce)
				if err != nil || d.Action != policy.Warn {
					b.Fatalf("Decide = %v, %v; want warn", d.Action, err)
				}
				if pl.body = p.rewrite(&pl, body, &d); len(pl.body) <= len(body) {
					b.Fatal("nothing injected")
				}
				pl.releaseBody() // as serve does once the request is sent
			}
		})
	}
}

// longLoopingHistory is an agent session of n turns, about 2 KB each, whose
// last three calls repeat a failing build.
func longLoopingHistory(n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Fix the failing build."}`)
	for i := 0; i < n; i++ {
		args := fmt.Sprintf(`{\"path\":\"src/file%d.go\"}`, i)
		result := strings.Repeat(fmt.Sprintf("%d: func handler%d(w http.ResponseWriter) {}\n", i, i), 40)
		name := "read_file"
		if i >= n-3 {
			name, args, result = "bash", `{\"command\":\"make build\"}`, "make: *** No rule to make target 'build'.  Stop.\nexit code 2"
		}
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Step %d.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":%q,"arguments":"%s"}}]}`, i, i, name, args)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":%q}`, i, result)
	}
	b.WriteString(`]}`)
	return b.String()
}
