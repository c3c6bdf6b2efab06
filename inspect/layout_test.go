package inspect

import (
	"encoding/json"
	"strings"
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

// TestParseNestedArguments: arguments with objects inside arrays (todo
// lists, multi-edits) canonicalise like any other; they once made the
// canonicaliser index past its scratch stack, failing the whole parse.
func TestParseNestedArguments(t *testing.T) {
	args := []string{
		`{"todos":[{"id":1,"status":"in_progress"},{"status":"done","id":2}]}`,
		`{"edits":[[{"b":1,"a":[{"y":2,"x":1}]}]],"path":"a.go"}`,
		`[{"k":{"z":[{"q":1}]}}]`,
	}
	for _, a := range args {
		body := `{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"t","arguments":` + strconvQuote(a) + `}}]},{"role":"tool","tool_call_id":"1","content":"ok"}]}`
		tr, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse with arguments %s: %v", a, err)
		}
		if got := tr.Steps[0].Calls[0].Args; !gjson.Valid(got) || len(got) != len(a)-strings.Count(a, " ") {
			t.Errorf("canonical arguments of %s = %s", a, got)
		}
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
