package inspect

import "testing"

// TestCallFacts: the facts of a call's arguments, whether setArgs stored
// them or a Call built by hand computes them on use.
func TestCallFacts(t *testing.T) {
	for _, tt := range []struct {
		name, args, primary string
		want                uint8
	}{
		{"no quote", `[1,2]`, "", 0},
		{"plain command", `{"command":"ls -la"}`, "ls -la", argsQuoted},
		{"path", `{"path":"a.go","new_str":"x"}`, "a.go", argsQuoted | argsPathish},
		{"file_path", `{"file_path":"a.go"}`, "a.go", argsQuoted | argsPathish},
		{"escaped key", `{"p\u0061th":"a.go"}`, "", argsQuoted | argsPathish},
		{"patch", `{"input":"*** Begin Patch\n*** Update File: a.go\n"}`, "", argsQuoted | argsPatch | argsPathish}, // its \n is an escape
		{"restore", `{"command":"git checkout -- a.go"}`, "git checkout -- a.go", argsQuoted | primaryRestores},
		{"copy back", `{"command":"cp a.bak a"}`, "cp a.bak a", argsQuoted | primaryRestores},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Call{Name: "tool", Args: tt.args, Primary: tt.primary}
			if got := c.facts() &^ factsKnown; got != tt.want {
				t.Errorf("facts of a built call %05b, want %05b", got, tt.want)
			}
			c.argFacts = argFactsOf(&c)
			if got := c.facts(); got != tt.want|factsKnown {
				t.Errorf("stored facts %05b, want %05b", got, tt.want|factsKnown)
			}
		})
	}
	tr, err := Parse([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"git checkout -- a.go\"}"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c := tr.Steps[0].Calls[0]; c.argFacts != argFactsOf(&c) || c.argFacts&primaryRestores == 0 {
		t.Errorf("parsed call's facts %05b, want %05b", c.argFacts, argFactsOf(&c))
	}
}
