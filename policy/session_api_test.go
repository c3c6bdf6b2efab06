package policy

import (
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
)

func TestSessionKeyForOtherAPIs(t *testing.T) {
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
		ka, kb := SessionKeyFor(tt.api, nil, []byte(tt.a)), SessionKeyFor(tt.api, nil, []byte(tt.b))
		if (ka == kb) != tt.wantSame || !strings.HasPrefix(ka, derivedPrefix) {
			t.Errorf("%s: keys %q and %q; want same=%v", tt.name, ka, kb, tt.wantSame)
		}
	}
	claude := `{"model":"claude","metadata":{"user_id":"user_abc_account__session_42"},"messages":[]}`
	if k := SessionKeyFor(inspect.AnthropicMessages, nil, []byte(claude)); k != "user_abc_account__session_42" {
		t.Errorf("anthropic metadata.user_id key = %q", k)
	}
}
