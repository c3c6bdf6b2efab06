package policy

import (
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
)

func TestIdentifyOtherAPIs(t *testing.T) {
	responses := func(callID string, extra string) string {
		return `{"model":"gpt","instructions":"be brief","input":[{"role":"user","content":"fix it"},` +
			`{"type":"function_call","call_id":"` + callID + `","name":"bash","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"` + callID + `","output":"x"}` + extra + `]}`
	}
	anthropic := func(id string, extra string) string {
		return `{"model":"claude","system":"be brief","messages":[{"role":"user","content":"fix it"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"bash","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"x"}]}` + extra + `]}`
	}
	gemini := func(args string, extra string) string {
		return `{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"fix it"}]},` +
			`{"role":"model","parts":[{"functionCall":{"name":"bash","args":` + args + `}}]},` +
			`{"role":"user","parts":[{"functionResponse":{"name":"bash","response":{"output":"x"}}}]}` + extra + `]}`
	}
	codeAssist := func(args string, extra string) string {
		return `{"model":"gemini-2.5-pro","project":"p","request":` + gemini(args, extra) + `}`
	}
	tests := []struct {
		name     string
		api      inspect.API
		a, b     string
		wantSame bool
	}{
		{"responses: the run goes on", wireapi.Responses, responses("call_1", ""),
			responses("call_1", `,{"type":"function_call","call_id":"call_2","name":"bash","arguments":"{}"}`), true},
		{"responses: another run", wireapi.Responses, responses("call_1", ""), responses("call_9", ""), false},
		{"anthropic: the run goes on", wireapi.Anthropic, anthropic("toolu_1", ""),
			anthropic("toolu_1", `,{"role":"assistant","content":"done"}`), true},
		{"anthropic: another run", wireapi.Anthropic, anthropic("toolu_1", ""), anthropic("toolu_2", ""), false},
		{"gemini: the run goes on", wireapi.Gemini, gemini(`{"c":"ls"}`, ""),
			gemini(`{"c":"ls"}`, `,{"role":"model","parts":[{"text":"done"}]}`), true},
		{"gemini: another run", wireapi.Gemini, gemini(`{"c":"ls"}`, ""), gemini(`{"c":"pwd"}`, ""), false},
		{"code assist: the run goes on", wireapi.CodeAssist, codeAssist(`{"c":"ls"}`, ""),
			codeAssist(`{"c":"ls"}`, `,{"role":"model","parts":[{"text":"done"}]}`), true},
	}
	for _, tt := range tests {
		a, b := Identify(tt.api, nil, []byte(tt.a)), Identify(tt.api, nil, []byte(tt.b))
		// Reruns of one prompt share the key; their first turns differ.
		if a.Key != b.Key || (a.Turn == b.Turn) != tt.wantSame || a.Turn == "" || !strings.HasPrefix(a.Key, derivedPrefix) {
			t.Errorf("%s: identities %+v and %+v; want one key, same turn=%v", tt.name, a, b, tt.wantSame)
		}
	}
	// Gemini CLI signed in with Google names its session in the request.
	named := `{"model":"m","project":"p","request":{"contents":[],"session_id":"9f1c-gemini-session"}}`
	if k := Identify(wireapi.CodeAssist, nil, []byte(named)).Key; k != "9f1c-gemini-session" {
		t.Errorf("code assist request.session_id key = %q", k)
	}
	// The same opening on Gemini and on Code Assist is two runs' keys.
	if g, c := Identify(wireapi.Gemini, nil, []byte(gemini("{}", ""))).Key, Identify(wireapi.CodeAssist, nil, []byte(codeAssist("{}", ""))).Key; g == c {
		t.Errorf("gemini and code assist share key %q; want one per API", g)
	}
	// Claude Code's legacy user_id ends with the session id its header sends.
	claude := `{"model":"claude","metadata":{"user_id":"user_abc_account__session_42"},"messages":[]}`
	if k := Identify(wireapi.Anthropic, nil, []byte(claude)).Key; k != "42" {
		t.Errorf("anthropic metadata.user_id key = %q", k)
	}
	other := `{"model":"claude","metadata":{"user_id":"team-7"},"messages":[]}`
	if k := Identify(wireapi.Anthropic, nil, []byte(other)).Key; k != "team-7" {
		t.Errorf("anthropic metadata.user_id key = %q; want the user_id as it is", k)
	}
}
