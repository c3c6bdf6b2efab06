package proxy

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// benchUpstream serves a fixed JSON answer and a 500-event SSE stream on loopback.
func benchUpstream(b *testing.B) string {
	b.Helper()
	var stream strings.Builder
	for i := 0; i < 500; i++ {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func gjsonStream(body []byte) bool { return strings.Contains(string(body), `"stream":true`) }

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
	up := benchUpstream(b)
	_, base := startProxy(b, func(c *Config) { c.Upstream.URL = up; c.Log.Level = "error" })
	client := &fasthttp.HostClient{Addr: strings.TrimPrefix(base, "http://"), StreamResponseBody: false, MaxConns: 64}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			req.SetRequestURI(base + path)
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			req.SetBody(body)
			if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("Do: %v %d", err, resp.StatusCode())
			}
		}
	})
}

// BenchmarkForward is plain forwarding of a 20 KB non-chat request.
func BenchmarkForward20KB(b *testing.B) { benchProxy(b, "/v1/embeddings", chatBody(20<<10, false)) }

// BenchmarkChat20KB is a 20 KB chat request through the whole pipeline
// (session key, trajectory, detectors, policy) with a non-streamed answer.
func BenchmarkChat20KB(b *testing.B) { benchProxy(b, "/v1/chat/completions", chatBody(20<<10, false)) }

// BenchmarkStream500 is a chat request answered by a 500-event stream that
// the proxy parses and inspects event by event.
func BenchmarkChatStream500Events(b *testing.B) {
	benchProxy(b, "/v1/chat/completions", chatBody(2<<10, true))
}

// BenchmarkForwardStream500 relays a 500-event stream without inspection.
func BenchmarkForwardStream500Events(b *testing.B) {
	benchProxy(b, "/v1/stream", chatBody(2<<10, false))
}
