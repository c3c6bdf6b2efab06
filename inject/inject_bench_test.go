package inject

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
)

// longHistory builds a request of turns tool-calling turns, about 2 KB each,
// whose last repeat turns all make the same call.
func longHistory(turns, repeat int) ([]byte, []inspect.CallRef) {
	var b strings.Builder
	var calls []inspect.CallRef
	b.WriteString(`{"model":"gpt-4.1","stream":true,"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Fix the bug."}`)
	out := strings.Repeat(`line of tool output with \"quotes\" and \u00e9 `, 38)
	msg := 2
	for i := 0; i < turns; i++ {
		args := fmt.Sprintf(`{\"command\":\"cat file%d.go\"}`, i)
		if i >= turns-repeat {
			args = `{\"command\":\"git status\"}`
			calls = append(calls, inspect.CallRef{Step: i, Message: msg, ToolCallID: fmt.Sprintf("call_%d", i), Name: "bash", Args: `{"command":"git status"}`})
		}
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Step %d: let me look.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"bash","arguments":"%s"}}]}`, i, i, args)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":"%s"}`, i, out)
		msg += 2
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}]}`)
	return []byte(b.String()), calls
}

const benchText = Marker + " Possible loop: tool_repetition fired on bash(git status) x5 (count 5, threshold 3). Repeating it will not help; try a different approach."

func BenchmarkInsert(b *testing.B) {
	body, _ := longHistory(200, 0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := insertChat(body, Auto, benchText); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInsertEncodingJSON is the naive baseline: decode the request,
// append to the last message, encode it again (and lose its byte form).
func BenchmarkInsertEncodingJSON(b *testing.B) {
	body, _ := longHistory(200, 0)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil {
			b.Fatal(err)
		}
		msgs := req["messages"].([]any)
		last := msgs[len(msgs)-1].(map[string]any)
		last["content"] = last["content"].(string) + "\n\n" + benchText
		if _, err := json.Marshal(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkApplyWarning(b *testing.B) {
	body, calls := longHistory(200, 5)
	in, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	v := inspect.Verdict{Loop: true, Category: inspect.ToolRepetition, Confidence: 0.95, Detections: []inspect.Detection{{
		Category: inspect.ToolRepetition, Score: 0.95,
		Evidence: inspect.Evidence{Element: "bash(git status)", Tool: "bash", Args: `{"command":"git status"}`, Count: 5, Threshold: 3, Calls: calls},
	}}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Apply(body, Edit{Warnings: []Loop{{Verdict: v}}}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCollapse(b *testing.B) {
	body, calls := longHistory(200, 50)
	in, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		_, c, err := in.Collapse(body, calls)
		if err != nil || c.Turns != 49 {
			b.Fatalf("Collapse removed %d turns, %v; want 49", c.Turns, err)
		}
	}
}
