package inspect

import (
	"errors"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

func TestParseOllamaChat(t *testing.T) {
	type call struct {
		id, name, args, result string
		isErr                  bool
	}
	type step struct {
		msg   int
		text  string
		calls []call
	}
	tests := []struct {
		name      string
		give      string
		wantSteps []step
		wantStart int
		wantMsgs  int
	}{
		{
			name:      "text only, thinking is no text",
			give:      `{"model":"qwen3","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello","thinking":"greet"}],"options":{"num_ctx":4096}}`,
			wantSteps: []step{{msg: 2, text: "hello"}},
			wantStart: 0, wantMsgs: 3,
		},
		{
			name: "object arguments, results paired by order and tool_name",
			give: `{"messages":[{"role":"user","content":"go"},
				{"role":"assistant","content":"","tool_calls":[
					{"function":{"name":"read_file","arguments":{"path":"a.go","limit":10}}},
					{"function":{"name":"bash","arguments":{"command":"go test ./..."}}},
					{"function":{"name":"read_file","arguments":{"path":"b.go"}}}]},
				{"role":"tool","tool_name":"bash","content":"FAIL\nexit status 1"},
				{"role":"tool","tool_name":"read_file","content":"A"},
				{"role":"tool","tool_name":"read_file","content":"B"}]}`,
			wantSteps: []step{{msg: 1, calls: []call{
				{name: "read_file", args: `{"limit":10,"path":"a.go"}`, result: "A"},
				{name: "bash", args: `{"command":"go test ./..."}`, result: "FAIL\nexit status 1", isErr: true},
				{name: "read_file", args: `{"path":"b.go"}`, result: "B"}}}},
			wantMsgs: 5,
		},
		{
			name: "results without a name pair by order",
			give: `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"ls","arguments":{}}},{"function":{"name":"pwd","arguments":{}}}]},
				{"role":"tool","content":"x"},{"role":"tool","content":"/src"}]}`,
			wantSteps: []step{{msg: 0, calls: []call{{name: "ls", args: "{}", result: "x"}, {name: "pwd", args: "{}", result: "/src"}}}},
			wantMsgs:  3,
		},
		{
			name: "ids and tool_call_id, as newer clients send, pair by id",
			give: `{"messages":[{"role":"assistant","tool_calls":[{"id":"c1","function":{"index":0,"name":"ls","arguments":{"path":"."}}},{"id":"c2","function":{"index":1,"name":"ls","arguments":{"path":"src"}}}]},
				{"role":"tool","tool_call_id":"c2","tool_name":"ls","content":"main.go"},{"role":"tool","tool_call_id":"c1","tool_name":"ls","content":"src"}]}`,
			wantSteps: []step{{msg: 0, calls: []call{{id: "c1", name: "ls", args: `{"path":"."}`, result: "src"}, {id: "c2", name: "ls", args: `{"path":"src"}`, result: "main.go"}}}},
			wantMsgs:  3,
		},
		{
			name:      "string arguments, as some clients send, read as chat's",
			give:      `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"grep","arguments":"{\"pattern\":\"x\"}"}}]},{"role":"tool","tool_name":"grep","content":"no matches"}]}`,
			wantSteps: []step{{msg: 0, calls: []call{{name: "grep", args: `{"pattern":"x"}`, result: "no matches"}}}},
			wantMsgs:  2,
		},
		{
			name: "a new human message moves the window; an orphan result is dropped",
			give: `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"ls","arguments":{}}}]},{"role":"tool","tool_name":"ls","content":"x"},
				{"role":"user","content":"now task two","images":["aGk="]},
				{"role":"assistant","content":"done"},{"role":"tool","tool_name":"ls","content":"orphan"}]}`,
			wantSteps: []step{{msg: 0, calls: []call{{name: "ls", args: "{}", result: "x"}}}, {msg: 3, text: "done"}},
			wantStart: 1, wantMsgs: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := ParseAPI(wireapi.Ollama, []byte(tt.give))
			if err != nil {
				t.Fatalf("ParseAPI: %v", err)
			}
			if tr.Messages != tt.wantMsgs || tr.Start != tt.wantStart {
				t.Errorf("Messages, Start = %d, %d; want %d, %d", tr.Messages, tr.Start, tt.wantMsgs, tt.wantStart)
			}
			if len(tr.Steps) != len(tt.wantSteps) {
				t.Fatalf("%d steps; want %d: %+v", len(tr.Steps), len(tt.wantSteps), tr.Steps)
			}
			for i, w := range tt.wantSteps {
				g := tr.Steps[i]
				if g.Message != w.msg || g.Text != w.text || len(g.Calls) != len(w.calls) {
					t.Fatalf("step %d = %+v; want %+v", i, g, w)
				}
				for k, wc := range w.calls {
					gc := g.Calls[k]
					if got := (call{gc.ID, gc.Name, gc.Args, gc.Result, gc.IsError}); got != wc {
						t.Errorf("step %d call %d = %+v; want %+v", i, k, got, wc)
					}
				}
			}
		})
	}
}

func TestParseOllamaChatMalformed(t *testing.T) {
	for _, give := range []string{`{"model":"x"}`, `{"messages":{}}`, `{"messages":["x"]}`, `{"messages":[{"content":"x"}]}`, `{"messages":[`} {
		if tr, err := ParseAPI(wireapi.Ollama, []byte(give)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseAPI(ollama, %s) = %v, %v; want ErrMalformed", give, tr, err)
		}
	}
}

// FuzzParseOllamaChat: no panic on any body, and an accepted body inspects.
func FuzzParseOllamaChat(f *testing.F) { fuzzAdapter(f, wireapi.Ollama, "ollama") }
