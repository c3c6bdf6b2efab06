package inject

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// loopCalls are the calls of the loop inspect finds in body: the evidence
// a reset collapses, with the indices inspect gives them.
func loopCalls(t *testing.T, api inspect.API, body []byte) []inspect.CallRef {
	t.Helper()
	e, err := inspect.NewEngine(inspect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	traj, err := e.ParseAPI(api, body)
	if err != nil {
		t.Fatal(err)
	}
	v := e.Inspect(traj)
	if !v.Loop {
		t.Fatalf("no loop in %s", body)
	}
	return evidence(v).Calls
}

// responsesTurn is one Codex-like turn: a reasoning item, then a call.
func responsesTurn(i int, cmd string) string {
	return fmt.Sprintf(`{"type":"reasoning","id":"rs_%d","summary":[],"encrypted_content":"x"},`+
		`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"bash","arguments":"{\"command\":\"%s\"}"},`+
		`{"type":"function_call_output","call_id":"call_%d","output":"exit code 2"}`, i, i, i, cmd, i)
}

// anthropicTurn is one tool_use turn and its results message; extra, when
// not "", is a text block the results message also carries.
func anthropicTurn(i int, cmd, extra string) string {
	results := fmt.Sprintf(`{"type":"tool_result","tool_use_id":"toolu_%d","content":"exit code 2","is_error":true}`, i)
	if extra != "" {
		results += `,{"type":"text","text":"` + extra + `"}`
	}
	return fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"Trying."},{"type":"tool_use","id":"toolu_%d","name":"bash","input":{"command":"%s"}}]},`+
		`{"role":"user","content":[%s]}`, i, cmd, results)
}

// history joins turns built by turn for the commands, in order.
func historyOf(cmds []string, turn func(i int, cmd string) string) string {
	parts := make([]string, len(cmds))
	for i, c := range cmds {
		parts[i] = turn(i, c)
	}
	return strings.Join(parts, ",")
}

func TestCollapseOtherAPIs(t *testing.T) {
	rep := []string{"make build", "make build", "make build", "make build", "make build"}
	cycle := []string{"make build", "make test", "make build", "make test", "make build", "make test"}
	responses := func(cmds []string) string {
		return `{"model":"gpt-5","input":[{"role":"user","content":"Fix the build."},` + historyOf(cmds, responsesTurn) + `]}`
	}
	anthropic := func(cmds []string, extra func(i int) string) string {
		return `{"model":"claude","max_tokens":9,"messages":[{"role":"user","content":"Fix the build."},` +
			historyOf(cmds, func(i int, c string) string { return anthropicTurn(i, c, extra(i)) }) + `]}`
	}
	none := func(int) string { return "" }
	tests := []struct {
		name      string
		api       inspect.API
		body      string
		wantTurns int
		wantItems int    // array elements removed
		wantNote  string // the note's count, on the first kept result
	}{
		{"responses/repetition", wireapi.Responses, responses(rep), 4, 12, "repeated 5 times"},
		{"responses/cycle", wireapi.Responses, responses(cycle), 4, 12, "repeated 3 times"},
		{"anthropic/repetition", wireapi.Anthropic, anthropic(rep, none), 4, 8, "repeated 5 times"},
		{"anthropic/cycle", wireapi.Anthropic, anthropic(cycle, none), 4, 8, "repeated 3 times"},
		// A results message that also says something is not only results:
		// its turn stays, the others go.
		{"anthropic/results-with-text", wireapi.Anthropic,
			anthropic(rep, func(i int) string { return map[int]string{2: "note from the user"}[i] }), 3, 6, "repeated 5 times"},
	}
	in := newTestInjector(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			orig := bytes.Clone(body)
			collapse, arr := in.CollapseResponses, "input"
			if tt.api == wireapi.Anthropic {
				collapse, arr = in.CollapseAnthropic, "messages"
			}
			out, c, err := collapse(body, loopCalls(t, tt.api, body))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body, orig) {
				t.Fatal("collapse modified its input")
			}
			if !gjson.ValidBytes(out) {
				t.Fatalf("output is not valid JSON:\n%s", out)
			}
			if c.Turns != tt.wantTurns || c.Messages != tt.wantItems || c.Saved != len(body)-len(out) {
				t.Errorf("collapsed %+v; want %d turns, %d elements, saved %d", c, tt.wantTurns, tt.wantItems, len(body)-len(out))
			}
			if got := len(gjson.GetBytes(body, arr).Array()) - len(gjson.GetBytes(out, arr).Array()); got != tt.wantItems {
				t.Errorf("%d elements fewer; want %d", got, tt.wantItems)
			}
			if err := checkPairs(tt.api, out); err != nil {
				t.Errorf("%v:\n%s", err, out)
			}
			if !strings.Contains(string(out), Marker+" this call was "+tt.wantNote) {
				t.Errorf("no note %q in\n%s", tt.wantNote, out)
			}
			// Every kept element is the input's bytes, but for the note.
			in := map[string]bool{}
			for _, v := range gjson.GetBytes(body, arr).Array() {
				in[v.Raw] = true
			}
			for _, v := range gjson.GetBytes(out, arr).Array() {
				if !in[v.Raw] && !strings.Contains(v.Raw, Marker) {
					t.Errorf("element not from the input: %s", v.Raw)
				}
			}
		})
	}
}

// checkPairs checks that every call of a Responses or Anthropic history has
// its result and every result its call, and (Anthropic) that each result
// answers the assistant turn right before it, user and assistant alternating.
func checkPairs(api inspect.API, body []byte) error {
	if api == wireapi.Responses {
		calls := map[string]int{}
		for _, v := range gjson.GetBytes(body, "input").Array() {
			id := v.Get("call_id").String()
			switch v.Get("type").String() {
			case "function_call":
				calls[id]++
			case "function_call_output":
				if calls[id] != 1 {
					return fmt.Errorf("output %s answers %d calls before it", id, calls[id])
				}
				calls[id] = -1
			}
		}
		for id, n := range calls {
			if n != -1 {
				return fmt.Errorf("call %s without its output", id)
			}
		}
		return nil
	}
	var pending []string
	role := ""
	for _, m := range gjson.GetBytes(body, "messages").Array() {
		r := m.Get("role").String()
		if r == role {
			return fmt.Errorf("two %s messages in a row", r)
		}
		role = r
		var answered []string
		var calls []string
		for _, b := range m.Get("content").Array() {
			switch b.Get("type").String() {
			case "tool_use":
				calls = append(calls, b.Get("id").String())
			case "tool_result":
				answered = append(answered, b.Get("tool_use_id").String())
			}
		}
		if strings.Join(answered, ",") != strings.Join(pending, ",") {
			return fmt.Errorf("results %v answer calls %v", answered, pending)
		}
		pending = calls
	}
	if len(pending) > 0 {
		return fmt.Errorf("calls %v without results", pending)
	}
	return nil
}
