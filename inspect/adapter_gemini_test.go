package inspect

import (
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

func TestParseGemini(t *testing.T) {
	type call struct{ id, name, args, result string }
	type step struct {
		msg   int
		text  string
		calls []call
		err   bool
	}
	tests := []struct {
		name      string
		api       API
		give      string
		wantSteps []step
		wantStart int
		wantModel string
	}{
		{
			name: "Gemini CLI's calls without ids, paired by name in order",
			api:  wireapi.Gemini,
			give: `{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"go"}]},
				{"role":"model","parts":[{"text":"plan","thought":true},{"text":"Reading."},
					{"functionCall":{"name":"read_file","args":{"path":"a.go"}}},{"functionCall":{"name":"read_file","args":{"path":"b.go"}}}]},
				{"role":"user","parts":[{"functionResponse":{"name":"read_file","response":{"output":"A"}}},
					{"functionResponse":{"name":"read_file","response":{"output":"B"}}}]}]}`,
			wantSteps: []step{{msg: 1, text: "plan\nReading.", calls: []call{
				{"", "read_file", `{"path":"a.go"}`, "A"}, {"", "read_file", `{"path":"b.go"}`, "B"}}}},
		},
		{
			name: "ids pair, an error response fails the call, another response is its JSON",
			api:  wireapi.Gemini,
			give: `{"contents":[{"role":"model","parts":[{"functionCall":{"id":"c1","name":"edit","args":{}}},{"functionCall":{"id":"c2","name":"ls"}}]},
				{"role":"user","parts":[{"functionResponse":{"id":"c2","name":"ls","response":{"files":["x"]}}},
					{"functionResponse":{"id":"c1","name":"edit","response":{"error":"no such file"}}}]}]}`,
			wantSteps: []step{{msg: 0, calls: []call{{"c1", "edit", "{}", "no such file"}, {"c2", "ls", "{}", `{"files":["x"]}`}}, err: true}},
		},
		{
			name: "a new user text moves the window; Code Assist's request and model",
			api:  wireapi.CodeAssist,
			give: `{"model":"gemini-2.5-pro","project":"p","request":{"contents":[{"role":"user","parts":[{"text":"one"}]},
				{"role":"model","parts":[{"text":"done"}]},{"role":"user","parts":[{"text":"now task two"}]},
				{"role":"model","parts":[{"functionCall":{"name":"ls","args":{}}}]}]}}`,
			wantSteps: []step{{msg: 1, text: "done"}, {msg: 3, calls: []call{{"", "ls", "{}", ""}}}},
			wantStart: 1, wantModel: "gemini-2.5-pro",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := ParseAPI(tt.api, []byte(tt.give))
			if err != nil {
				t.Fatalf("ParseAPI: %v", err)
			}
			if tr.Start != tt.wantStart || tr.Model != tt.wantModel {
				t.Errorf("Start, Model = %d, %q; want %d, %q", tr.Start, tr.Model, tt.wantStart, tt.wantModel)
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
					if got := (call{gc.ID, gc.Name, gc.Args, gc.Result}); got != wc {
						t.Errorf("step %d call %d = %+v; want %+v", i, k, got, wc)
					}
				}
				if w.err && !g.Calls[0].IsError {
					t.Errorf("step %d call 0 not failed; want the error response to fail it", i)
				}
			}
		})
	}
}

func TestParseGeminiMalformed(t *testing.T) {
	for _, give := range []string{`{}`, `{"contents":{}}`, `{"contents":[1]}`, `{"request":[]}`, `[]`} {
		for _, api := range []API{wireapi.Gemini, wireapi.CodeAssist} {
			if _, err := ParseAPI(api, []byte(give)); err == nil {
				t.Errorf("ParseAPI(%s, %s) = nil error; want ErrMalformed", api, give)
			}
		}
	}
}

// FuzzParseGemini: no panic on any body, and an accepted body inspects.
func FuzzParseGemini(f *testing.F) { fuzzAdapter(f, wireapi.Gemini, "gemini") }

// FuzzParseCodeAssist is FuzzParseGemini for the wrapped request.
func FuzzParseCodeAssist(f *testing.F) { fuzzAdapter(f, wireapi.CodeAssist, "code_assist") }
