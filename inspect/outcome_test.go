package inspect

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

// outcomeCase is a history whose detection of cat reports want as its
// Evidence.Result.
type outcomeCase struct {
	cacheCase
	cat  Category
	want string
}

// outcomeCases: the rules that report a group's outcome report its latest
// result (the one the agent saw last), and param_drift reports one only
// when two or more results agree.
func outcomeCases() (out []outcomeCase) {
	failure := func(i int) string {
		return fmt.Sprintf("Traceback (most recent call last):\nModuleNotFoundError: No module named 'requests'\nsearched %s\n", []string{"site", "venv", "user", "system", "local"}[i])
	}
	read := func(i int) string { return fmt.Sprintf(`{"path":"big.log","offset":%d,"limit":50}`, 4000+i) }
	past := func(i int) string {
		return fmt.Sprintf("Error: offset 4000 is beyond the end of big.log\nhint: %s\n", []string{"seek", "tail", "head", "grep"}[i])
	}
	tests := []struct {
		name string
		msgs func() []json.RawMessage
		cat  Category
		want string // Evidence.Result
	}{
		{"tool_repetition in the window: the same error, other output", func() (m []json.RawMessage) {
			for i := 0; i < 5; i++ {
				m = append(m, chatTurn(2*i, "python app.py", failure(i))...)
				m = append(m, chatTurn(2*i+1, fmt.Sprintf("ls dir%d", i), fmt.Sprintf("file%d.go", i))...)
			}
			for i := 10; i < 13; i++ { // the group's latest before the last three calls
				m = append(m, chatTurn(i, fmt.Sprintf("cat notes_%d.md", i), fmt.Sprintf("notes %d\nsee the docs\n", i))...)
			}
			return m
		}, ToolRepetition, outcomeText(failure(4))},
		{"param_drift: the same error, other output", func() (m []json.RawMessage) {
			for i := 0; i < 4; i++ {
				m = append(m, toolTurn(i, "read_file", read(i), past(i))...)
			}
			// The latest result before the last three calls and the
			// latest answered.
			m = append(m, chatTurn(4, "cat notes.md", "notes\nlower the offset\n")...)
			for i := 5; i < 8; i++ {
				m = append(m, toolTurn(i, "read_file", read(i), "")...)
			}
			return m
		}, ParamDrift, outcomeText(past(3))},
		{"param_drift: a call answered after a later one", func() (m []json.RawMessage) {
			m = append(m, toolTurn(0, "read_file", read(0), "")...)
			m = append(m, toolTurn(1, "read_file", read(1), past(1))...)
			for i := 2; i < 4; i++ {
				m = append(m, toolTurn(i, "read_file", read(i), "")...)
			}
			m = append(m, chatTurn(4, "cat notes.md", "notes\nlower the offset\n")...)
			for i := 5; i < 8; i++ {
				m = append(m, toolTurn(i, "read_file", read(i), "")...)
			}
			// The first call's answer comes last: the second's result is
			// then the latest of two that agree.
			return append(m, json.RawMessage(`{"role":"tool","tool_call_id":"call_0","content":`+strconv.Quote(past(0))+`}`))
		}, ParamDrift, outcomeText(past(1))},
		{"param_drift: one result, the other calls unanswered", func() (m []json.RawMessage) {
			m = append(m, toolTurn(0, "read_file", read(0), past(0))...)
			for i := 1; i < 4; i++ {
				m = append(m, toolTurn(i, "read_file", read(i), "")...)
			}
			return m
		}, ParamDrift, ""},
	}
	for _, tt := range tests {
		msgs := append([]json.RawMessage{json.RawMessage(`{"role":"user","content":"Fix the build."}`)}, tt.msgs()...)
		h := history{api: wireapi.Chat, key: "messages", rest: map[string]json.RawMessage{"model": json.RawMessage(`"gpt-4o"`)}, msgs: msgs}
		out = append(out, outcomeCase{cacheCase{tt.name, h}, tt.cat, tt.want})
	}
	return out
}

func TestReportedOutcome(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range outcomeCases() {
		t.Run(tt.name, func(t *testing.T) {
			v := e.Inspect(mustParse(t, tt.h.body(tt.h.msgs)))
			for _, d := range v.Detections {
				if d.Category != tt.cat {
					continue
				}
				if d.Evidence.Result != tt.want {
					t.Errorf("%s reports %q; want %q", tt.cat, d.Evidence.Result, tt.want)
				}
				return
			}
			t.Fatalf("Inspect = %v; want a %s detection", v.Detections, tt.cat)
		})
	}
}
