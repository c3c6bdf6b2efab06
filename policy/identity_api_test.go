package policy

import (
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
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
	tests := []struct {
		name     string
		api      inspect.API
		a, b     string
		wantSame bool
	}{
		{"responses: the run goes on", inspect.Responses, responses("call_1", ""),
			responses("call_1", `,{"type":"function_call","call_id":"call_2","name":"bash","arguments":"{}"}`), true},
		{"responses: another run", inspect.Responses, responses("call_1", ""), responses("call_9", ""), false},
		{"anthropic: the run goes on", inspect.AnthropicMessages, anthropic("toolu_1", ""),
			anthropic("toolu_1", `,{"role":"assistant","content":"done"}`), true},
		{"anthropic: another run", inspect.AnthropicMessages, anthropic("toolu_1", ""), anthropic("toolu_2", ""), false},
	}
	for _, tt := range tests {
		a, b := Identify(tt.api, nil, []byte(tt.a)), Identify(tt.api, nil, []byte(tt.b))
		// Reruns of one prompt share the key; their first turns differ.
		if a.Key != b.Key || (a.Turn == b.Turn) != tt.wantSame || a.Turn == "" || !strings.HasPrefix(a.Key, derivedPrefix) {
			t.Errorf("%s: identities %+v and %+v; want one key, same turn=%v", tt.name, a, b, tt.wantSame)
		}
	}
	// Claude Code's legacy user_id ends with the session id its header sends.
	claude := `{"model":"claude","metadata":{"user_id":"user_abc_account__session_42"},"messages":[]}`
	if k := SessionKeyFor(inspect.AnthropicMessages, nil, []byte(claude)); k != "42" {
		t.Errorf("anthropic metadata.user_id key = %q", k)
	}
	other := `{"model":"claude","metadata":{"user_id":"team-7"},"messages":[]}`
	if k := SessionKeyFor(inspect.AnthropicMessages, nil, []byte(other)); k != "team-7" {
		t.Errorf("anthropic metadata.user_id key = %q; want the user_id as it is", k)
	}
}
