package inspect_test

import (
	"fmt"
	"strings"

	"github.com/loopguard/loopguard/inspect"
)

// loopingBody is a chat request whose agent ran `git status` n times and
// got the same answer every time.
func loopingBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-4o","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Commit the fix."}`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Checking.","tool_calls":[{"id":"c%d","type":"function","function":{"name":"bash","arguments":"{\"command\":\"git status\"}"}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"c%d","content":"On branch main\nnothing to commit, working tree clean"}`, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// Parse reads the history once: each assistant turn becomes a Step, each
// tool call a Call paired with its result, with canonical arguments and
// fingerprints the detectors compare.
func ExampleParse() {
	body := []byte(`{"model":"gpt-4o","messages":[
		{"role":"user","content":"What is in main.go?"},
		{"role":"assistant","content":"Reading it.","tool_calls":[{"id":"a","type":"function",
			"function":{"name":"read_file","arguments":"{\"task_progress\":\"1/3\",\"path\":\"main.go\"}"}}]},
		{"role":"tool","tool_call_id":"a","content":"package main"}]}`)
	t, err := inspect.Parse(body)
	if err != nil {
		fmt.Println(err)
		return
	}
	c := t.Steps[0].Calls[0]
	fmt.Printf("%d messages, %d step, start %d\n", t.Messages, len(t.Steps), t.Start)
	fmt.Printf("%s %s primary=%q result=%q (message %d)\n", c.Name, c.Args, c.Primary, c.Result, c.ResultMessage)

	_, err = inspect.Parse([]byte(`{"messages":"not an array"}`))
	fmt.Println(err)
	// Output:
	// 3 messages, 1 step, start 0
	// read_file {"path":"main.go"} primary="main.go" result="package main" (message 2)
	// inspect: malformed chat request: messages is not an array
}

// Inspect runs every detector family over a trajectory and aggregates
// their scores: five identical calls with an unchanged result are a loop.
func ExampleEngine_Inspect() {
	e, err := inspect.NewEngine(inspect.DefaultConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, n := range []int{2, 5} {
		t, err := inspect.Parse(loopingBody(n))
		if err != nil {
			fmt.Println(err)
			return
		}
		v := e.Inspect(t)
		fmt.Printf("%d calls: loop=%v", n, v.Loop)
		if v.Loop {
			d := v.Detections[0]
			fmt.Printf(" %s confidence %.2f, steps %d-%d, no progress %v", v.Category, v.Confidence, d.Evidence.First, d.Evidence.Last, d.Evidence.NoProgress)
		}
		fmt.Println()
	}
	// Output:
	// 2 calls: loop=false
	// 5 calls: loop=true tool_repetition confidence 0.96, steps 0-4, no progress true
}

// Brief is the short form for a log line; Summary is one sentence for
// people. The zero Verdict (no loop) renders empty strings.
func ExampleVerdict_Brief() {
	e, _ := inspect.NewEngine(inspect.DefaultConfig())
	t, _ := inspect.Parse(loopingBody(5))
	v := e.Inspect(t)
	fmt.Println(v.Brief())
	fmt.Printf("%q\n", inspect.Verdict{}.Brief())
	// Output:
	// bash(git status) x5
	// ""
}
