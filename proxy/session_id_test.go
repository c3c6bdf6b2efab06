package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/policy"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// TestSessionPrefixIsStripped: the /s/<id>/ prefix names the session above
// every header and never reaches the upstream, on guarded and other paths.
func TestSessionPrefixIsStripped(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswer)
	})
	tests := []struct {
		method, path, body string
		wantURI            string
		wantSession        string // X-Loopguard-Session; "" on paths that are not guarded
	}{
		{"POST", "/s/run-42/v1/chat/completions", loopingHistory(1, false), "/v1/chat/completions", "run-42"},
		{"POST", "/s/run-42/chat/completions", loopingHistory(1, false), "/chat/completions", "run-42"},
		{"POST", "/s/run-42/v1/responses", responsesHistory(1, false), "/v1/responses", "run-42"},
		{"POST", "/s/run-42/responses", responsesHistory(1, false), "/responses", "run-42"},
		{"POST", "/s/run-42/v1/messages", anthropicHistory(1, false), "/v1/messages", "run-42"},
		{"POST", "/s/run-42/messages", anthropicHistory(1, false), "/messages", "run-42"},
		{"POST", "/s/A.b_c-9/v1/chat/completions", loopingHistory(1, false), "/v1/chat/completions", "A.b_c-9"},
		{"GET", "/s/run-42/v1/models", "", "/v1/models", ""},
		{"GET", "/s/run-42/v1/models?limit=2", "", "/v1/models?limit=2", ""},
		{"POST", "/s/run-42/v1/embeddings", `{"input":"x"}`, "/v1/embeddings", ""},
	}
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-ID", "header-loses")
			req.Header.Set("session-id", "header-loses-too")
			resp, err := newClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d; want 200", resp.StatusCode)
			}
			r := <-got
			if r.uri != tt.wantURI {
				t.Fatalf("upstream saw %s; want %s", r.uri, tt.wantURI)
			}
			if s := resp.Header.Get(HeaderSession); s != tt.wantSession {
				t.Fatalf("%s = %q; want %q", HeaderSession, s, tt.wantSession)
			}
		})
	}
}

// TestSessionPrefixMalformed: a bad id is answered 400 with an OpenAI-shaped
// error and nothing reaches the upstream.
func TestSessionPrefixMalformed(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, chatAnswer)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	tests := []struct{ name, path, want string }{
		{"empty id", "/s//v1/chat/completions", "empty id"},
		{"too long", "/s/" + strings.Repeat("a", 129) + "/v1/chat/completions", "longer than 128"},
		{"no API path", "/s/run-1", "must be followed by the API path"},
		{"colon", "/s/h:0123/v1/chat/completions", "only letters, digits"},
		{"encoded slash", "/s/a%2Fb/v1/chat/completions", "only letters, digits"},
		{"space", "/s/a%20b/v1/models", "only letters, digits"},
		{"leading dot", "/s/.x/v1/models", "start with a letter or a digit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := newClient().Post(base+tt.path, "application/json", strings.NewReader(loopingHistory(1, false)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d (%s); want 400", resp.StatusCode, b)
			}
			e := gjson.ParseBytes(b).Get("error")
			if e.Get("type").String() != "invalid_request_error" || e.Get("code").String() != "invalid_session_id" ||
				!strings.Contains(e.Get("message").String(), tt.want) {
				t.Fatalf("error %s; want invalid_request_error, invalid_session_id and a message with %q", b, tt.want)
			}
		})
	}
	select {
	case r := <-got:
		t.Fatalf("the upstream was called: %s %s", r.method, r.uri)
	default:
	}
}

// TestSessionHeadersOfRealAgents: six requests of one run are one session
// whatever the agent sends: its own session header, or nothing at all.
func TestSessionHeadersOfRealAgents(t *testing.T) {
	tests := []struct {
		name, path string
		history    func(int, bool) string
		header     http.Header
		want       string // "" means a derived key
	}{
		{"codex on responses", "/v1/responses", responsesHistory,
			http.Header{"Session-Id": {"0199a213-81c0-7800-8aa1-bbab2a035a53"}}, "0199a213-81c0-7800-8aa1-bbab2a035a53"},
		{"claude code on messages", "/v1/messages", anthropicHistory,
			http.Header{"X-Claude-Code-Session-Id": {"54c1eb09-bc4c-4d2f-98eb-6d2ab2d5e2fe"}}, "54c1eb09-bc4c-4d2f-98eb-6d2ab2d5e2fe"},
		{"pi with session_id", "/v1/chat/completions", loopingHistory, http.Header{"Session_id": {"pi-7"}}, "pi-7"},
		{"opencode with affinity", "/v1/chat/completions", loopingHistory, http.Header{"X-Session-Affinity": {"ses_1"}}, "ses_1"},
		{"X-Session-ID before agent headers", "/v1/chat/completions", loopingHistory,
			http.Header{"X-Session-Id": {"mine"}, "Session-Id": {"codex"}}, "mine"},
		{"blank header falls through", "/v1/chat/completions", loopingHistory,
			http.Header{"X-Session-Id": {"  "}, "Session-Id": {"codex"}}, "codex"},
		{"chat agent without a header", "/v1/chat/completions", loopingHistory, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"id":"x"}`)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			first := ""
			for n := 0; n < 6; n++ {
				req, _ := http.NewRequest("POST", base+tt.path, strings.NewReader(tt.history(n, false)))
				for k, v := range tt.header {
					req.Header[k] = v
				}
				resp, err := newClient().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s := resp.Header.Get(HeaderSession)
				if n == 0 {
					first = s
					if tt.want != "" && s != tt.want || tt.want == "" && !strings.HasPrefix(s, "h:") {
						t.Fatalf("request 1: session %q; want %q (\"\" means derived)", s, tt.want)
					}
				} else if s != first {
					t.Fatalf("request %d: session %q; want %q, the first request's", n+1, s, first)
				}
			}
		})
	}
}

// TestUpstreamPerWireAPI: with upstream.anthropic_url set, Anthropic traffic
// (its path or its anthropic-version header) goes there, the rest to url.
func TestUpstreamPerWireAPI(t *testing.T) {
	answer := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x"}`)
	}
	openai, gotOpenAI := upstreamRecorder(t, answer)
	anthropic, gotAnthropic := upstreamRecorder(t, answer)
	_, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = openai.URL + "/v1"
		c.Upstream.AnthropicURL = anthropic.URL + "/v1"
	})
	tests := []struct {
		path, body string
		anthropic  bool // sent with anthropic-version
		want       <-chan recorded
		wantURI    string
	}{
		{"/s/r1/v1/chat/completions", loopingHistory(1, false), false, gotOpenAI, "/v1/chat/completions"},
		{"/s/r1/v1/responses", responsesHistory(1, false), false, gotOpenAI, "/v1/responses"},
		{"/s/r1/v1/messages", anthropicHistory(1, false), true, gotAnthropic, "/v1/messages"},
		{"/s/r1/messages", anthropicHistory(1, false), false, gotAnthropic, "/v1/messages"},
		{"/s/r1/v1/messages/count_tokens", anthropicHistory(1, false), true, gotAnthropic, "/v1/messages/count_tokens"},
		{"/v1/models", "", false, gotOpenAI, "/v1/models"},
		{"/v1/models", "", true, gotAnthropic, "/v1/models"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("POST", base+tt.path, strings.NewReader(tt.body))
		if tt.anthropic {
			req.Header.Set("anthropic-version", "2023-06-01")
		}
		resp, err := newClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		select {
		case r := <-tt.want:
			if r.uri != tt.wantURI {
				t.Errorf("%s: upstream saw %s; want %s", tt.path, r.uri, tt.wantURI)
			}
		default:
			t.Errorf("%s (anthropic-version %v): the other upstream was called", tt.path, tt.anthropic)
			select {
			case <-gotOpenAI:
			case <-gotAnthropic:
			}
		}
	}
}

// TestSessionKeyOfBody: the session key read in the same pass as the
// request's options (policy.IdentifyFields) is the one policy.Identify
// reads from the body alone, in every API and policy mode, wherever in the
// body the member that names the session is.
func TestSessionKeyOfBody(t *testing.T) {
	up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x"}`)
	})
	tests := []struct {
		name, path string
		api        inspect.API
		body       string
		want       string // "" means a derived key
	}{
		{"user after the messages", "/v1/chat/completions", wireapi.Chat,
			`{"messages":[{"role":"user","content":"Fix it."}],"model":"m","user":"u-1"}`, "u-1"},
		{"metadata.session_id", "/v1/chat/completions", wireapi.Chat,
			`{"model":"m","metadata":{"session_id":"s-2"},"messages":[{"role":"user","content":"Fix it."}]}`, "s-2"},
		{"derived from the opening", "/v1/chat/completions", wireapi.Chat,
			`{"messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"Fix it."}],"model":"m","stream":false}`, ""},
		{"escaped member name", "/v1/chat/completions", wireapi.Chat,
			`{"messages":[{"role":"user","content":"Fix it."}],"\u0075ser":"u-3"}`, "u-3"},
		{"anthropic user_id", "/v1/messages", wireapi.Anthropic,
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"Fix it."}],"metadata":{"user_id":"{\"session_id\":\"c-4\"}"}}`, "c-4"},
		{"anthropic derived", "/v1/messages", wireapi.Anthropic,
			`{"model":"m","max_tokens":10,"system":"You are an agent.","messages":[{"role":"user","content":"Fix it."}]}`, ""},
		{"responses derived", "/v1/responses", wireapi.Responses,
			`{"model":"m","instructions":"You are an agent.","input":[{"role":"user","content":"Fix it."}]}`, ""},
	}
	for _, mode := range []policy.Mode{policy.ModeOff, policy.ModeEnforce} {
		_, base := startProxy(t, func(c *Config) {
			c.Upstream.URL = up.URL
			c.Policy.Mode = mode
		})
		for _, tt := range tests {
			t.Run(string(mode)+"/"+tt.name, func(t *testing.T) {
				resp, err := newClient().Post(base+tt.path, "application/json", strings.NewReader(tt.body))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				got, want := resp.Header.Get(HeaderSession), policy.Identify(tt.api, nil, []byte(tt.body)).Key
				if got != want || tt.want != "" && got != tt.want || tt.want == "" && !strings.HasPrefix(got, "h:") {
					t.Errorf("session %q; want %q (Identify), %q (\"\" means derived)", got, want, tt.want)
				}
			})
		}
	}
}

// TestClientHeaders: the one pass over a request's headers finds the
// session id and the mode that a Peek of each header finds: the first
// header of a name counts, blank or not, the names in the configured
// order, any case.
func TestClientHeaders(t *testing.T) {
	cfg := policy.DefaultConfig()
	tests := []struct {
		name        string
		headers     [][2]string
		wantSession string
		wantMode    string
	}{
		{"none", [][2]string{{"Content-Type", "application/json"}}, "", ""},
		{"X-Session-ID", [][2]string{{"X-Session-ID", "a"}}, "a", ""},
		{"any case", [][2]string{{"x-session-id", "a"}, {"x-loopguard-mode", "off"}}, "a", "off"},
		{"configured order wins over header order", [][2]string{{"session-id", "codex"}, {"X-Session-ID", "own"}}, "own", ""},
		{"a later name when the first is absent", [][2]string{{"x-opencode-session", "oc"}, {"x-claude-code-session-id", "cc"}}, "cc", ""},
		{"a blank first name passes to the next", [][2]string{{"X-Session-ID", " \t"}, {"session_id", "pi"}}, "pi", ""},
		{"a name's first header counts, blank or not", [][2]string{{"X-Session-ID", " "}, {"X-Session-ID", "later"}}, "", ""},
		{"a name's first header counts", [][2]string{{"X-Session-ID", "first"}, {"X-Session-ID", "second"}}, "first", ""},
		{"first mode", [][2]string{{"X-Loopguard-Mode", "shadow"}, {"X-Loopguard-Mode", "off"}}, "", "shadow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			for _, h := range tt.headers {
				ctx.Request.Header.Add(h[0], h[1])
			}
			session, mode := clientHeaders(&ctx, &cfg)
			if string(session) != tt.wantSession || string(mode) != tt.wantMode {
				t.Errorf("clientHeaders = %q, %q; want %q, %q", session, mode, tt.wantSession, tt.wantMode)
			}
			if peeked := peekSessionID(&ctx.Request.Header, &cfg); string(peeked) != tt.wantSession {
				t.Errorf("by Peek: %q; want %q", peeked, tt.wantSession)
			}
			if peeked := ctx.Request.Header.Peek(headerMode); string(peeked) != tt.wantMode {
				t.Errorf("mode by Peek: %q; want %q", peeked, tt.wantMode)
			}
			ctx.SetUserValue(sessionIDKey, []byte("prefixed"))
			if session, mode := clientHeaders(&ctx, &cfg); string(session) != "prefixed" || string(mode) != tt.wantMode {
				t.Errorf("with a /s/<id>/ prefix: %q, %q; want %q, %q", session, mode, "prefixed", tt.wantMode)
			}
		})
	}
}
