package proxy

import (
	"fmt"
	"testing"

	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// requestOptions are the options of a plan that its answer may depend on.
type requestOptions struct {
	stream, usage bool
	maxTok        int64
	model         string
}

func optionsOf(pl *plan) requestOptions {
	return requestOptions{stream: pl.stream, usage: pl.usage, maxTok: pl.maxTok, model: pl.model}
}

// TestOptionsPastTheHistory: the options a body carries after its history
// are read in every mode. When the client names the session, nothing else
// past the history is needed to name it, so the pass over the body stops
// at the history and the options past it are read after the history's
// parse, or, in mode off, only when the chat event reports them.
func TestOptionsPastTheHistory(t *testing.T) {
	const history = `[{"role":"system","content":"You are an agent."},{"role":"user","content":"Fix \"it\"]}."},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"make\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"ok"}]`
	const options = `"model":"m2","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":9`
	want := requestOptions{stream: true, usage: true, maxTok: 9, model: "m2"}
	tests := []struct {
		name       string
		body       string
		mode       policy.Mode
		session    string // X-Session-ID; "" derives the key from the body
		chatEvents bool
		unread     bool // the options past the history are left unread
	}{
		{"enforce, named", `{"max_tokens":5,"messages":` + history + `,` + options + `}`, policy.ModeEnforce, "s-1", false, false},
		{"enforce, derived", `{"max_tokens":5,"messages":` + history + `,` + options + `}`, policy.ModeEnforce, "", false, false},
		{"enforce, named, two histories", `{"messages":[],"max_tokens":5,"messages":` + history + `,` + options + `}`, policy.ModeEnforce, "s-1", false, false},
		{"enforce, named, unreadable history", `{"max_tokens":5,"messages":"none",` + options + `}`, policy.ModeEnforce, "s-1", false, false},
		{"shadow, named", `{"max_tokens":5,"messages":` + history + `,` + options + `}`, policy.ModeShadow, "s-1", false, false},
		{"off, derived", `{"max_tokens":5,"messages":` + history + `,` + options + `}`, policy.ModeOff, "", false, false},
		{"off, named", `{"max_tokens":5,"messages":` + history + `,` + options + `}`, policy.ModeOff, "s-1", false, true},
		{"off, named, chat events", `{"max_tokens":5,"messages":` + history + `,` + options + `}`, policy.ModeOff, "s-1", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := modePipeline(t, tt.mode)
			p.chatEvents = tt.chatEvents
			body := []byte(tt.body)
			pl := p.decide(chatRequest(tt.session), chatAPI, body)
			if tt.unread {
				if pl.unread == 0 || body[pl.unread] != '[' {
					t.Fatalf("unread = %d; want the history's start", pl.unread)
				}
				if got := optionsOf(&pl); got != (requestOptions{maxTok: 5}) {
					t.Errorf("options before reading past the history = %+v; want only max_tokens read", got)
				}
				pl.finishOptions(body, -1)
			}
			if pl.unread != 0 {
				t.Errorf("unread = %d after the plan was made; want 0", pl.unread)
			}
			if got := optionsOf(&pl); got != want {
				t.Errorf("options = %+v; want %+v", got, want)
			}
			if pl.failOpen != "" && tt.name != "enforce, named, unreadable history" {
				t.Errorf("failed open at %s", pl.failOpen)
			}
		})
	}
}

// modePipeline is a pipeline in policy mode mode, with an observer (decide
// reports each request to it), closed when tb ends.
func modePipeline(tb testing.TB, mode policy.Mode) *pipeline {
	cfg := DefaultConfig()
	cfg.Upstream.URL = "http://127.0.0.1:1"
	cfg.Policy.Mode = mode
	obs, err := observe.New(prometheus.NewRegistry(), zerolog.Nop(), observe.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := newPipeline(cfg, zerolog.Nop(), obs)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// chatRequest is a chat completions request whose client names its session
// with X-Session-ID, or names none when session is "".
func chatRequest(session string) *fasthttp.RequestCtx {
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/v1/chat/completions")
	if session != "" {
		ctx.Request.Header.Set("X-Session-ID", session)
	}
	return ctx
}

// BenchmarkDecide is the pipeline's work on a 31 KB agent request before
// the upstream call: the options and the session key, and in enforce the
// parse of the history (a warm session cache: the request repeats the last
// one), the detectors and the policy; for a session the client names
// (X-Session-ID) and one whose key is derived from the body.
func BenchmarkDecide(b *testing.B) {
	body := chatBody(31<<10, false)
	for _, mode := range []policy.Mode{policy.ModeOff, policy.ModeEnforce} {
		for _, session := range []string{"named", ""} {
			b.Run(fmt.Sprintf("%s/named=%v", mode, session != ""), func(b *testing.B) {
				p, ctx := modePipeline(b, mode), chatRequest(session)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					pl := p.decide(ctx, chatAPI, body)
					pl.releaseBody()
				}
			})
		}
	}
}
