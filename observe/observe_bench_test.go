package observe

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
	"github.com/rs/zerolog"
)

// hotPath is what the proxy calls for one chat request and its response.
func hotPath(o *Observer, req *RequestInfo, resp *ResponseInfo) {
	o.Request(*req)
	o.Response(*resp)
}

func benchInfos() (*RequestInfo, *ResponseInfo) {
	d := &policy.Decision{Mode: policy.ModeEnforce, Action: policy.None, Would: policy.None, Level: -1}
	req := &RequestInfo{Session: "bench-session", Model: "gpt-4o", Steps: 12, Tool: "bash", Fingerprint: 0x1234,
		Decision: d, DetectDuration: 40 * time.Microsecond, StoreDuration: 2 * time.Microsecond}
	resp := &ResponseInfo{Session: "bench-session", Path: "/v1/chat/completions", Status: 200, Streamed: true,
		UpstreamLatency: 80 * time.Millisecond, TTFB: 90 * time.Millisecond, Duration: 2 * time.Second, Events: 120, Bytes: 9000}
	return req, resp
}

// BenchmarkHotPath measures the observability cost of one chat request:
// Request after the decision plus Response at the end of the stream.
func BenchmarkHotPath(b *testing.B) {
	o, err := New(nil, zerolog.Nop(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	req, resp := benchInfos()
	hotPath(o, req, resp)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		o.StreamOpened()
		hotPath(o, req, resp)
	}
}

// BenchmarkHotPathDetection is a request with a loop and an intervention,
// logged to a discarding JSON logger.
func BenchmarkHotPathDetection(b *testing.B) {
	o, err := New(nil, zerolog.New(discard{}), Options{})
	if err != nil {
		b.Fatal(err)
	}
	req, resp := benchInfos()
	req.Decision = loopDecision(inspect.ToolRepetition, policy.Constrain, 1, "p")
	req.Decision.Reapplied = true
	hotPath(o, req, resp)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		hotPath(o, req, resp)
	}
}

// BenchmarkHotPathParallel measures contention on the recorder's lock with
// many sessions at once.
func BenchmarkHotPathParallel(b *testing.B) {
	o, err := New(nil, zerolog.Nop(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("session-%d", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req, resp := benchInfos()
		i := 0
		for pb.Next() {
			req.Session = keys[i%len(keys)]
			i++
			o.Request(*req)
			o.Response(*resp)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// fill records n sessions with a few requests each, a third of them looping.
func fill(o *Observer, n int) {
	cats := []inspect.Category{inspect.ToolRepetition, inspect.ErrorCycle, inspect.SameResult, inspect.ParamDrift}
	for i := range n {
		key := fmt.Sprintf("session-%05d", i)
		model := fmt.Sprintf("model-%d", i%8)
		for step := range 3 {
			info := RequestInfo{Session: key, Model: model, Steps: step + 1, Tool: "bash", Fingerprint: uint64(i)}
			if i%3 == 0 && step > 0 {
				info.Decision = loopDecision(cats[i%len(cats)], policy.Warn, step-1, fmt.Sprint("p", i))
				if step == 2 {
					info.Decision.Action = policy.Constrain
				}
			}
			o.Request(info)
		}
	}
}

// BenchmarkAdminEndpoints10k times the dashboard's data endpoints with
// 10,000 sessions in the recorder (target < 50ms each).
func BenchmarkAdminEndpoints10k(b *testing.B) {
	o, err := New(nil, zerolog.Nop(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	fill(o, 10000)
	a, err := NewAdmin(o.Recorder(), AdminOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, target := range []string{
		"/loopguard/api/sessions?limit=200",
		"/loopguard/api/sessions?category=error_cycle&model=model-3&limit=200",
		"/loopguard/api/sessions/session-00300",
		"/loopguard/api/stats",
		"/loopguard/api/stats?category=tool_repetition&model=model-0",
	} {
		b.Run(target, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				a.ServeHTTP(w, localRequest("GET", target, "", loopback))
				if w.Code != 200 {
					b.Fatalf("GET %s = %d", target, w.Code)
				}
			}
		})
	}
}
