package proxy

import (
	"testing"

	"github.com/tidwall/gjson"
)

// TestRecordMembersAsGjson: the members a Responses record depends on,
// read in one pass, are those gjson.Get finds one at a time (the first of
// duplicates, escaped names decoded, absent ones absent).
func TestRecordMembersAsGjson(t *testing.T) {
	for _, body := range []string{
		responsesHistory(3, false),
		`{"input":[{"role":"user","content":"hi"}],"model":"m","store":false,"previous_response_id":"resp_1"}`,
		`{"input":"just text","conversation":{"id":"conv_1"},"instructions":"Be brief."}`,
		`{"previous_response_id":"a","input":[],"previous_response_id":"b","store":true,"store":false}`,
		`{"previous_\u0072esponse_id":"resp_2","input":[{"type":"function_call_output","call_id":"c","output":"\"}]"}]}`,
		`{"model":null,"conversation":"conv_2"}`,
		`{}`,
	} {
		m := recordMembersOf([]byte(body))
		for _, f := range []struct {
			name string
			got  gjson.Result
		}{
			{"previous_response_id", m.previous}, {"conversation", m.conversation}, {"input", m.input},
			{"store", m.store}, {"model", m.model}, {"instructions", m.instructions},
		} {
			if want := gjson.Get(body, f.name); f.got.Raw != want.Raw || f.got.Exists() != want.Exists() {
				t.Errorf("%s of %.80s = %q; gjson.Get finds %q", f.name, body, f.got.Raw, want.Raw)
			}
		}
	}
}

func TestMoreItemsThan(t *testing.T) {
	tests := []struct {
		input string
		want  bool // more than maxChainStart (4)
	}{
		{`"just text"`, false},
		{`[]`, false},
		{`[{"role":"user","content":"a"},{},{},{}]`, false},
		{`[{"role":"user","content":"a"},{},{},{},{}]`, true},
		{gjson.Get(responsesHistory(300, false), "input").Raw, true},
	}
	for _, tt := range tests {
		input := gjson.Parse(tt.input)
		if got := moreItemsThan(input, maxChainStart); got != tt.want {
			t.Errorf("moreItemsThan(%.60s, %d) = %v; want %v", tt.input, maxChainStart, got, tt.want)
		}
		if got, want := moreItemsThan(input, maxChainStart), len(inputItems(input)) > maxChainStart; got != want {
			t.Errorf("moreItemsThan(%.60s) = %v; len(inputItems) > %d = %v", tt.input, got, maxChainStart, want)
		}
	}
}
