package inspect

import (
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

func TestParseAnthropic(t *testing.T) {
	type call struct {
		id, name, args, result string
		isErr                  bool
		errText                string
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
			name:      "text only",
			give:      `{"model":"claude","system":"be brief","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`,
			wantSteps: []step{{msg: 1, text: "hello"}},
			wantMsgs:  2,
		},
		{
			name: "thinking, text, parallel tool_use and results in another order",
			give: `{"messages":[{"role":"user","content":[{"type":"text","text":"go"}]},
				{"role":"assistant","content":[{"type":"thinking","thinking":"plan","signature":"s"},{"type":"redacted_thinking","data":"x"},
					{"type":"text","text":"Reading."},
					{"type":"tool_use","id":"t1","name":"read_file","input":{"path":"a.go","limit":10}},
					{"type":"tool_use","id":"t2","name":"grep","input":"{\"pattern\":\"x\"}"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"no"},{"type":"image","source":{}}]},
					{"type":"tool_result","tool_use_id":"t1","content":"A"},
					{"type":"text","text":"<system-reminder>todo list empty</system-reminder>"}]}]}`,
			wantSteps: []step{{msg: 1, text: "Reading.", calls: []call{
				{id: "t1", name: "read_file", args: `{"limit":10,"path":"a.go"}`, result: "A"},
				{id: "t2", name: "grep", args: `{"pattern":"x"}`, result: "no"}}}},
			wantMsgs: 3,
		},
		{
			name: "is_error marks a failure the text does not show",
			give: `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"edit","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"The user rejected the edit at 0x1f3a."}]},
				{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"edit","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","is_error":false,"content":"done"}]}]}`,
			wantSteps: []step{
				{msg: 0, calls: []call{{id: "t1", name: "edit", args: "{}", result: "The user rejected the edit at 0x1f3a.", isErr: true,
					errText: "is_error: The user rejected the edit at <addr>."}}},
				{msg: 2, calls: []call{{id: "t2", name: "edit", args: "{}", result: "done"}}},
			},
			wantMsgs: 4,
		},
		{
			name: "new human message moves the window, tool results do not",
			give: `{"messages":[{"role":"user","content":"one"},
				{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"ls","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x"}]},
				{"role":"assistant","content":"done"},
				{"role":"user","content":[{"type":"text","text":"now task two"}]},
				{"role":"assistant","content":[{"type":"tool_use","id":"b","name":"ls","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"zz","content":"orphan"}]}]}`,
			wantSteps: []step{
				{msg: 1, calls: []call{{id: "a", name: "ls", args: "{}", result: "x"}}},
				{msg: 3, text: "done"},
				{msg: 5, calls: []call{{id: "b", name: "ls", args: "{}"}}},
			},
			wantStart: 2, wantMsgs: 7,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := ParseAPI(wireapi.Anthropic, []byte(tt.give))
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
					got := call{gc.ID, gc.Name, gc.Args, gc.Result, gc.IsError, gc.ErrorText()}
					if !wc.isErr {
						got.errText = wc.errText // only checked for errors
					}
					if got != wc {
						t.Errorf("step %d call %d = %+v; want %+v", i, k, got, wc)
					}
					if gc.IsError && gc.ErrorSignature() == 0 {
						t.Errorf("step %d call %d: error without a signature", i, k)
					}
				}
			}
		})
	}
}

// FuzzParseAnthropic: no panic on any body, and an accepted body inspects.
func FuzzParseAnthropic(f *testing.F) { fuzzAdapter(f, wireapi.Anthropic, "anthropic") }
