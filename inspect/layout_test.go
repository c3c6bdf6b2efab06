package inspect

import (
	"testing"

	"github.com/tidwall/gjson"
)

func TestLayoutLocatesMessages(t *testing.T) {
	tests := []struct {
		name, give string
	}{
		{"compact", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`},
		{"spaced, messages first", "{ \"messages\" : [ {\"role\":\"user\",\"content\":\"a\\\"]\"} ,\n {\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":[{\"type\":\"text\",\"text\":\"}\"}]} ] , \"model\":\"m\"}"},
		{"one message", `{"messages":[{"role":"user","content":"only"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := Parse([]byte(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			l := tr.Layout
			msgs := gjson.Get(tt.give, "messages")
			last := gjson.Get(tt.give, "messages.@reverse.0")
			if got := tt.give[l.Messages[0]:l.Messages[1]]; got != msgs.Raw {
				t.Errorf("Layout.Messages = %q; want %q", got, msgs.Raw)
			}
			if got := tt.give[l.Last[0]:l.Last[1]]; got != last.Raw {
				t.Errorf("Layout.Last = %q; want %q", got, last.Raw)
			}
		})
	}
	if tr, err := Parse([]byte(`{"messages":[]}`)); err != nil || tr.Layout != (Layout{}) {
		t.Errorf("empty messages: Layout = %v, %v; want zero", tr.Layout, err)
	}
}
