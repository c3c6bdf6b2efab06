package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/rs/zerolog"
)

// agentShape builds the body of request n (0-based) of one agent run, as the
// agent sends it: the opening, then n assistant turns with their results.
type agentShape struct {
	name string
	api  inspect.API
	// header is the session header value the agent sends ("" for none).
	header string
	body   func(run string, n int) string
	// want is the session key every request must get; "" means derived.
	want string
}

func chatRun(run string, n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"qwen3-coder","stream":true,"messages":[{"role":"system","content":"You are a coding agent."},` +
		`{"role":"user","content":"Fix the failing test in pkg/foo."}`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%s_%d","type":"function",`+
			`"function":{"name":"bash","arguments":"{\"command\":\"go test ./pkg/foo\"}"}}]},`+
			`{"role":"tool","tool_call_id":"call_%s_%d","content":"FAIL"}`, run, i, run, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func responsesRun(run string, n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-5-codex","instructions":"You are Codex.","stream":true,"input":[` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"Fix the failing test."}]}`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"type":"function_call","call_id":"call_%s_%d","name":"shell","arguments":"{\"command\":[\"go\",\"test\"]}"},`+
			`{"type":"function_call_output","call_id":"call_%s_%d","output":"FAIL"}`, run, i, run, i)
	}
	b.WriteString(`],"prompt_cache_key":"` + run + `"}`)
	return b.String()
}

func anthropicRun(metadata string) func(run string, n int) string {
	return func(run string, n int) string {
		var b strings.Builder
		b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,` + metadata +
			`"system":[{"type":"text","text":"You are Claude Code."}],"messages":[` +
			`{"role":"user","content":[{"type":"text","text":"Fix the failing test."}]}`)
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%s_%d","name":"Bash","input":{"command":"go test"}}]},`+
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%s_%d","content":"FAIL"}]}`, run, i, run, i)
		}
		b.WriteString(`]}`)
		return b.String()
	}
}

var agentShapes = []agentShape{
	{name: "chat agent, no header", api: wireapi.Chat, body: chatRun},
	{name: "codex on responses, session-id header", api: wireapi.Responses,
		header: "0199a213-81c0-7800-8aa1-bbab2a035a53", body: responsesRun, want: "0199a213-81c0-7800-8aa1-bbab2a035a53"},
	{name: "responses agent, no header", api: wireapi.Responses, body: responsesRun},
	{name: "claude code, header and metadata.user_id", api: wireapi.Anthropic,
		header: "54c1eb09-bc4c-4d2f-98eb-6d2ab2d5e2fe",
		body:   anthropicRun(`"metadata":{"user_id":"{\"device_id\":\"d1\",\"account_uuid\":\"\",\"session_id\":\"54c1eb09-bc4c-4d2f-98eb-6d2ab2d5e2fe\"}"},`),
		want:   "54c1eb09-bc4c-4d2f-98eb-6d2ab2d5e2fe"},
	{name: "claude code, metadata.user_id JSON only", api: wireapi.Anthropic,
		body: anthropicRun(`"metadata":{"user_id":"{\"device_id\":\"d1\",\"account_uuid\":\"\",\"session_id\":\"54c1eb09-bc4c-4d2f-98eb-6d2ab2d5e2fe\"}"},`),
		want: "54c1eb09-bc4c-4d2f-98eb-6d2ab2d5e2fe"},
	{name: "claude code, legacy metadata.user_id", api: wireapi.Anthropic,
		body: anthropicRun(`"metadata":{"user_id":"user_3f2a_account__session_9b1c0e6e-4b8e-4a51-9a4e-2f1d5c7e8a10"},`),
		want: "9b1c0e6e-4b8e-4a51-9a4e-2f1d5c7e8a10"},
	{name: "anthropic agent, no metadata", api: wireapi.Anthropic, body: anthropicRun("")},
}

// sessionOf is what the proxy does for each request: identify, then link.
func sessionOf(p *Policy, api inspect.API, header, body string) string {
	var h []byte
	if header != "" {
		h = []byte(header)
	}
	return p.Session(context.Background(), Identify(api, h, []byte(body)))
}

// TestSessionRunIsOneSession: six requests of one run of each agent shape,
// the first of them without an assistant turn, make one session.
func TestSessionRunIsOneSession(t *testing.T) {
	for _, tt := range agentShapes {
		t.Run(tt.name, func(t *testing.T) {
			p := New(Config{}, nil, zerolog.Nop())
			first := sessionOf(p, tt.api, tt.header, tt.body("a", 0))
			if tt.want != "" && first != tt.want {
				t.Fatalf("request 1: session %q; want %q", first, tt.want)
			}
			if tt.want == "" && !strings.HasPrefix(first, derivedPrefix) {
				t.Fatalf("request 1: session %q; want a derived key", first)
			}
			for n := 1; n < 6; n++ {
				if got := sessionOf(p, tt.api, tt.header, tt.body("a", n)); got != first {
					t.Fatalf("request %d: session %q; want %q, the first request's", n+1, got, first)
				}
			}
		})
	}
}

// TestSessionRerunsOfOnePrompt: two runs of the same prompt, one after the
// other or interleaved, are two sessions from their first assistant turn
// on; each run keeps one key throughout.
func TestSessionRerunsOfOnePrompt(t *testing.T) {
	for _, tt := range agentShapes {
		if tt.want != "" {
			continue // client ids tell runs apart by themselves
		}
		for _, interleaved := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/interleaved=%v", tt.name, interleaved), func(t *testing.T) {
				p := New(Config{}, nil, zerolog.Nop())
				keys := map[string][]string{}
				send := func(run string, n int) {
					keys[run] = append(keys[run], sessionOf(p, tt.api, "", tt.body(run, n)))
				}
				if interleaved {
					for n := 0; n < 6; n++ {
						send("a", n)
						send("b", n)
					}
				} else {
					for _, run := range []string{"a", "b"} {
						for n := 0; n < 6; n++ {
							send(run, n)
						}
					}
				}
				a, b := keys["a"], keys["b"]
				for n := 1; n < 6; n++ {
					if a[n] != a[0] {
						t.Fatalf("run a request %d: %q; want %q", n+1, a[n], a[0])
					}
					if b[n] != b[1] {
						t.Fatalf("run b request %d: %q; want %q", n+1, b[n], b[1])
					}
				}
				if b[1] == a[0] {
					t.Fatalf("run b shares run a's session %q", a[0])
				}
				if b[0] != a[0] {
					// The first request cannot be told apart; it links to
					// the run that claimed the key.
					t.Fatalf("run b request 1: %q; want run a's %q", b[0], a[0])
				}
			})
		}
	}
}

func TestSessionFailsOpenToTheDerivedKey(t *testing.T) {
	p := New(Config{}, failingStore{}, zerolog.Nop())
	id := Identify(wireapi.Chat, nil, []byte(chatRun("a", 2)))
	if id.Turn == "" {
		t.Fatal("Identify found no first assistant turn")
	}
	if got := p.Session(context.Background(), id); got != id.Key {
		t.Fatalf("Session with a failing store = %q; want the derived key %q", got, id.Key)
	}
}

func TestSessionResetKeepsTheRun(t *testing.T) {
	p := New(Config{}, nil, zerolog.Nop())
	k := sessionOf(p, wireapi.Chat, "", chatRun("a", 2))
	if err := p.ResetSession(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	if got := sessionOf(p, wireapi.Chat, "", chatRun("a", 3)); got != k {
		t.Fatalf("after a reset: session %q; want %q", got, k)
	}
}
