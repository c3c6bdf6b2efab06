package inspect

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

// sameTrajectory reports the first difference between two trajectories
// built from different APIs, ignoring message indices (each API numbers
// its own items).
func sameTrajectory(t *testing.T, got, want *Trajectory) {
	t.Helper()
	if len(got.Steps) != len(want.Steps) {
		t.Fatalf("%d steps; want %d", len(got.Steps), len(want.Steps))
	}
	if got.Start != want.Start {
		t.Errorf("Start = %d; want %d", got.Start, want.Start)
	}
	for i := range want.Steps {
		g, w := &got.Steps[i], &want.Steps[i]
		if g.Text != w.Text {
			t.Errorf("step %d text %q; want %q", i, g.Text, w.Text)
		}
		if len(g.Calls) != len(w.Calls) {
			t.Fatalf("step %d: %d calls; want %d", i, len(g.Calls), len(w.Calls))
		}
		for k := range w.Calls {
			gc, wc := g.Calls[k], w.Calls[k]
			gc.ResultMessage, wc.ResultMessage = 0, 0
			if gc.ID != wc.ID || gc.Name != wc.Name || gc.Args != wc.Args || gc.Primary != wc.Primary ||
				gc.Fingerprint != wc.Fingerprint || gc.PrimaryFingerprint != wc.PrimaryFingerprint ||
				gc.HasResult != wc.HasResult || gc.Result != wc.Result || gc.IsError != wc.IsError ||
				gc.ErrorSignature() != wc.ErrorSignature() || gc.ErrorText() != wc.ErrorText() {
				t.Errorf("step %d call %d = %+v; want %+v", i, k, gc, wc)
			}
		}
	}
}

// TestAdaptersMatchChat checks the point of the adapters: the same agent
// run, sent as chat completions, as a Responses API input or as Anthropic
// messages, is one trajectory and one verdict.
func TestAdaptersMatchChat(t *testing.T) {
	files, _ := filepath.Glob("testdata/adapters/*.chat.json")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, chatFile := range files {
		name := strings.TrimSuffix(filepath.Base(chatFile), ".chat.json")
		chatBody, err := os.ReadFile(chatFile)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Parse(chatBody)
		if err != nil {
			t.Fatalf("%s: Parse: %v", name, err)
		}
		wantV := e.Inspect(want)
		for _, api := range []API{wireapi.Responses, wireapi.Anthropic, wireapi.Ollama, wireapi.Gemini, wireapi.CodeAssist} {
			t.Run(name+"/"+string(api), func(t *testing.T) {
				body, err := os.ReadFile(strings.TrimSuffix(chatFile, "chat.json") + string(api) + ".json")
				if err != nil {
					t.Fatal(err)
				}
				if got := DetectAPI("", body); got != api {
					t.Errorf("DetectAPI(body) = %q; want %q", got, api)
				}
				got, err := e.ParseAPI(api, body)
				if err != nil {
					t.Fatalf("ParseAPI: %v", err)
				}
				sameTrajectory(t, got, want)
				v := e.Inspect(got)
				if v.Loop != wantV.Loop || v.Category != wantV.Category {
					t.Errorf("verdict loop=%v %s; want loop=%v %s", v.Loop, v.Category, wantV.Loop, wantV.Category)
				}
			})
		}
	}
}

func TestParseResponses(t *testing.T) {
	type call struct {
		id, name, args, primary, result string
		isErr                           bool
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
			name:     "string input",
			give:     `{"model":"gpt-5","input":"Write a haiku."}`,
			wantMsgs: 1,
		},
		{
			name:      "easy input messages and system roles",
			give:      `{"input":[{"role":"developer","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`,
			wantSteps: []step{{msg: 2, text: "hello"}},
			wantStart: 0, wantMsgs: 3,
		},
		{
			name: "reasoning, text and two calls are one turn",
			give: `{"input":[{"role":"user","content":"go"},
				{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"a"},{"type":"summary_text","text":"b"}]},
				{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Reading."}]},
				{"type":"function_call","call_id":"c1","name":"read_file","arguments":"{\"path\": \"a.go\"}"},
				{"type":"function_call","call_id":"c2","name":"read_file","arguments":"{\"path\":\"b.go\"}"},
				{"type":"function_call_output","call_id":"c2","output":"B"},
				{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"A"}]},
				{"type":"reasoning","id":"rs_2","summary":[]},
				{"type":"function_call","call_id":"c3","name":"bash","arguments":"{\"command\":\"cat a.go\"}"}]}`,
			wantSteps: []step{
				{msg: 1, text: "Reading.", calls: []call{
					{id: "c1", name: "read_file", args: `{"path":"a.go"}`, primary: "a.go", result: "A"},
					{id: "c2", name: "read_file", args: `{"path":"b.go"}`, primary: "b.go", result: "B"}}},
				{msg: 7, calls: []call{{id: "c3", name: "bash", args: `{"command":"cat a.go"}`, primary: "read a.go"}}},
			},
			wantMsgs: 9,
		},
		{
			name: "custom and local shell calls",
			give: `{"input":[{"type":"custom_tool_call","call_id":"p1","name":"apply_patch","input":"*** Begin Patch\n"},
				{"type":"custom_tool_call_output","call_id":"p1","output":"Error: patch failed"},
				{"type":"local_shell_call","id":"ls_1","call_id":"s1","action":{"type":"exec","command":["bash","-lc","ls"]}},
				{"type":"local_shell_call_output","id":"s1","output":"a b"}]}`,
			wantSteps: []step{
				{msg: 0, calls: []call{{id: "p1", name: "apply_patch", args: "*** Begin Patch", result: "Error: patch failed", isErr: true}}},
				{msg: 2, calls: []call{{id: "s1", name: "local_shell", args: `{"command":["bash","-lc","ls"],"type":"exec"}`, primary: "ls", result: "a b"}}},
			},
			wantMsgs: 4,
		},
		{
			name:     "continuation shows only the new outputs",
			give:     `{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c9","output":"x"}]}`,
			wantMsgs: 1,
		},
		{
			name: "genuine user message starts the window, nudge does not",
			give: `{"input":[{"role":"user","content":"task one"},
				{"type":"function_call","call_id":"a","name":"ls","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":"x"},
				{"role":"user","content":"task two"},
				{"type":"function_call","call_id":"b","name":"ls","arguments":"{}"},{"type":"function_call_output","call_id":"b","output":"x"},
				{"role":"user","content":"continue"},
				{"type":"function_call","call_id":"c","name":"ls","arguments":"{}"}]}`,
			wantSteps: []step{
				{msg: 1, calls: []call{{id: "a", name: "ls", args: "{}", result: "x"}}},
				{msg: 4, calls: []call{{id: "b", name: "ls", args: "{}", result: "x"}}},
				{msg: 7, calls: []call{{id: "c", name: "ls", args: "{}"}}},
			},
			wantStart: 1, wantMsgs: 8,
		},
		{
			name:     "item references and server tools are not steps",
			give:     `{"input":[{"type":"item_reference","id":"msg_1"},{"type":"web_search_call","id":"ws_1","status":"completed"}]}`,
			wantMsgs: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := ParseAPI(wireapi.Responses, []byte(tt.give))
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
					got := call{gc.ID, gc.Name, gc.Args, gc.Primary, gc.Result, gc.IsError}
					if got != wc {
						t.Errorf("step %d call %d = %+v; want %+v", i, k, got, wc)
					}
					if gc.HasResult != (wc.result != "") {
						t.Errorf("step %d call %d HasResult = %v", i, k, gc.HasResult)
					}
				}
			}
		})
	}
}

func TestParseAPIMalformed(t *testing.T) {
	tests := []struct {
		api  API
		give string
	}{
		{wireapi.Responses, `{"model":"x"}`},
		{wireapi.Responses, `{"input":42}`},
		{wireapi.Responses, `{"input":[1]}`},
		{wireapi.Responses, `[]`},
		{wireapi.Responses, `{"input":[`},
		{wireapi.Anthropic, `{"messages":{}}`},
		{wireapi.Anthropic, `{"messages":["x"]}`},
		{wireapi.Anthropic, `{"messages":[{"content":"x"}]}`},
		{wireapi.Chat, `{"input":"x"}`},
	}
	for _, tt := range tests {
		if tr, err := ParseAPI(tt.api, []byte(tt.give)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseAPI(%s, %s) = %v, %v; want ErrMalformed", tt.api, tt.give, tr, err)
		}
	}
}

func TestDetectAPI(t *testing.T) {
	tests := []struct {
		path, body string
		want       API
	}{
		{"/v1/chat/completions", `{}`, wireapi.Chat},
		{"/v1/responses", `{"messages":[]}`, wireapi.Responses},
		{"/v1/responses/?x=1", `{}`, wireapi.Responses},
		{"/v1/messages", `{}`, wireapi.Anthropic},
		{"/anthropic/v1/messages?beta=true", `{}`, wireapi.Anthropic},
		{"/api/chat", `{}`, wireapi.Ollama},
		{"", `{"model":"m","messages":[],"options":{"num_ctx":4096}}`, wireapi.Ollama},
		{"", `{"messages":[{"role":"tool","tool_name":"ls","content":"x"}]}`, wireapi.Ollama},
		{"", `{"input":"hi"}`, wireapi.Responses},
		{"", `{"previous_response_id":"r","input":[]}`, wireapi.Responses},
		{"", `{"system":"s","messages":[{"role":"user","content":"hi"}]}`, wireapi.Anthropic},
		{"", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`, wireapi.Anthropic},
		{"", `{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]}]}`, wireapi.Chat},
		{"", `{"messages":[{"role":"user","content":"hi"}]}`, wireapi.Chat},
		{"", `not json`, wireapi.Chat},
		{"/v1/models", `{"input":"x"}`, wireapi.Responses},
	}
	for _, tt := range tests {
		if got := DetectAPI(tt.path, []byte(tt.body)); got != tt.want {
			t.Errorf("DetectAPI(%q, %s) = %q; want %q", tt.path, tt.body, got, tt.want)
		}
	}
}

// FuzzParseResponses: no panic on any body, and an accepted body inspects.
func FuzzParseResponses(f *testing.F) { fuzzAdapter(f, wireapi.Responses, "responses") }

func fuzzAdapter(f *testing.F, api API, suffix string) {
	seeds, _ := filepath.Glob("testdata/adapters/*." + suffix + ".json")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	e, _ := NewEngine(DefaultConfig())
	f.Fuzz(func(t *testing.T, body []byte) {
		tr, err := ParseAPI(api, body)
		if err != nil {
			return
		}
		if tr.Start < 0 || tr.Start > len(tr.Steps) {
			t.Fatalf("Start = %d out of [0,%d]", tr.Start, len(tr.Steps))
		}
		v := e.Inspect(tr)
		_ = v.Brief() + v.Summary() + v.Full()
	})
}
