package demo

import (
	"github.com/loopguard/loopguard/internal/rawjson"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/inject"
)

// Model names select the scripted model's personality. Any other name gets
// the plain personality, which suits trying an arbitrary client.
const (
	// ModelStubborn calls `bash make build` on every turn, whatever it is
	// told: the agent it drives loops until loopguard ends the session.
	ModelStubborn = "demo-stubborn"
	// ModelListener also starts with `make build`, but once a loopguard
	// notice appears in its input it reads the Makefile, runs the right
	// target and finishes.
	ModelListener = "demo-listener"
	// ModelRambler answers with text that degenerates into one sentence
	// repeated, for loopguard's stream cut.
	ModelRambler = "demo-rambler"
)

// Commands the scripted model issues and the scripted agent knows how to run.
const (
	cmdBuild    = "make build"
	cmdMakefile = "cat Makefile"
	cmdAll      = "make all"
)

// ModelRambler's answer: a sensible start, then one sentence repeated
// until the stream is cut.
const (
	ramblerStart    = "Let me look at the config file. It was last changed yesterday, by the deploy script. "
	ramblerSentence = "I will check the file again. "
	ramblerRepeats  = 60
)

func ramblerAnswer() string { return ramblerStart + strings.Repeat(ramblerSentence, ramblerRepeats) }

// ramblerRecovered is ModelRambler's answer once told its last one was cut.
const ramblerRecovered = "Sorry about that. In short: the file has not changed since I last read it, so there is nothing more to check."

// finalAnswer is ModelListener's last message.
const finalAnswer = "Done: the Makefile has no `build` target, so I ran `make all`, which builds the project successfully."

// Script returns the scripted model as a fakellm script: one rule that
// answers every request from the history it carries, so that a model that
// "listens" really reacts to what loopguard injected.
func Script() fakellm.Script {
	return fakellm.Script{Rules: []fakellm.Rule{{Respond: respond}}}
}

// respond decides the model's answer from the request body. It must not
// fail on any input: Serve exposes it to arbitrary clients.
func respond(r *fakellm.Request) fakellm.Response {
	body := r.Body
	if !gjson.ValidBytes(body) {
		return fakellm.Response{Status: 400, Error: "request body is not valid JSON"}
	}
	model := gjson.GetBytes(body, "model").String()
	msgs := gjson.GetBytes(body, "messages").Array()
	tools := gjson.GetBytes(body, "tools").Array()
	switch model {
	case ModelStubborn:
		return stubborn(tools)
	case ModelListener:
		return listener(msgs, tools)
	case ModelRambler:
		if noticeSince(msgs) {
			return fakellm.Response{Content: ramblerRecovered}
		}
		// A small chunk size makes many deltas, as a real model streams
		// tokens, so the cut lands mid-stream rather than at the end.
		// The pause between deltas lets the cut stop the upstream before
		// it has sent everything, so the cut saves tokens as it would live.
		return fakellm.Response{Content: ramblerAnswer(), ChunkSize: 16, Delay: time.Millisecond}
	}
	return plain(msgs, tools)
}

// stubborn calls the same thing every time: make build with a bash tool,
// otherwise the first offered tool with fixed arguments.
func stubborn(tools []gjson.Result) fakellm.Response {
	if hasTool(tools, "bash") {
		return callBash("Let me run the build.", cmdBuild)
	}
	if len(tools) > 0 {
		return fakellm.Response{ToolCalls: []fakellm.ToolCall{firstToolCall(tools)}}
	}
	return fakellm.Response{Content: "Let me try that again."}
}

// listener follows the build task, and changes approach once a loopguard
// notice shows up after its last call.
func listener(msgs, tools []gjson.Result) fakellm.Response {
	if !hasTool(tools, "bash") {
		return plain(msgs, tools)
	}
	last := lastCommand(msgs)
	// The plan comes first: once the model has changed approach, a notice
	// about the abandoned loop does not send it back to the Makefile.
	switch {
	case last == cmdAll:
		return fakellm.Response{Content: finalAnswer}
	case last == cmdMakefile:
		return callBash("There is no `build` target; the target is `all`.", cmdAll)
	case noticeSince(msgs):
		return callBash("The build keeps failing the same way; let me look at the Makefile instead.", cmdMakefile)
	}
	return callBash("Let me run the build.", cmdBuild)
}

// plain answers any client sensibly: it calls the first offered tool once
// after each user message, then sums up in text.
func plain(msgs, tools []gjson.Result) fakellm.Response {
	n := len(msgs)
	if len(tools) > 0 && n > 0 && msgs[n-1].Get("role").String() == "user" {
		return fakellm.Response{
			Content:   "Let me use a tool for that.",
			ToolCalls: []fakellm.ToolCall{firstToolCall(tools)},
		}
	}
	if n > 0 && msgs[n-1].Get("role").String() == "tool" {
		return fakellm.Response{Content: "The tool answered (" +
			strconv.Itoa(len(msgs[n-1].Get("content").String())) +
			" bytes). This is loopguard's scripted demo model; try model \"" + ModelStubborn +
			"\" with a tool to watch loopguard step in."}
	}
	return fakellm.Response{Content: "Hello from loopguard's scripted demo model. It has no LLM behind it: offer it a " +
		"tool and use model \"" + ModelStubborn + "\" to see a loop detected, or \"" + ModelRambler +
		"\" with stream=true to see a degenerate stream cut."}
}

func callBash(say, command string) fakellm.Response {
	return fakellm.Response{
		Content:   say,
		ToolCalls: []fakellm.ToolCall{{Name: "bash", Arguments: string(rawjson.AppendQuote([]byte(`{"command":`), command)) + `}`}},
	}
}

func hasTool(tools []gjson.Result, name string) bool {
	for _, t := range tools {
		if t.Get("function.name").String() == name {
			return true
		}
	}
	return false
}

// firstToolCall calls the first offered tool with a placeholder for each
// required string parameter, which most schemas accept.
func firstToolCall(tools []gjson.Result) fakellm.ToolCall {
	fn := tools[0].Get("function")
	args := []byte{'{'}
	props := fn.Get("parameters.properties")
	for i, req := range fn.Get("parameters.required").Array() {
		if i > 0 {
			args = append(args, ',')
		}
		var val string
		switch props.Get(gjson.Escape(req.String()) + ".type").String() {
		case "integer", "number":
			val = "1"
		case "boolean":
			val = "true"
		case "array":
			val = "[]"
		case "object":
			val = "{}"
		default:
			val = `"demo"`
		}
		args = rawjson.AppendQuote(args, req.String())
		args = append(args, ':')
		args = append(args, val...)
	}
	args = append(args, '}')
	name := fn.Get("name").String()
	if name == "" {
		name = "tool"
	}
	return fakellm.ToolCall{Name: name, Arguments: string(args)}
}

// lastCommand is the bash command of the last assistant tool call.
func lastCommand(msgs []gjson.Result) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Get("role").String() != "assistant" {
			continue
		}
		calls := msgs[i].Get("tool_calls").Array()
		if len(calls) == 0 {
			return ""
		}
		return gjson.Get(calls[len(calls)-1].Get("function.arguments").String(), "command").String()
	}
	return ""
}

// noticeSince reports a loopguard notice in the messages after the last
// assistant turn: the input of this turn, wherever inject placed it.
func noticeSince(msgs []gjson.Result) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Get("role").String() == "assistant" {
			return false
		}
		if hasNotice(m.Get("content")) {
			return true
		}
	}
	return false
}

// hasNotice looks for a marker in a content that is a string or an array of
// parts.
func hasNotice(content gjson.Result) bool {
	texts := []gjson.Result{content}
	if content.IsArray() {
		texts = content.Get("#.text").Array()
	}
	for _, t := range texts {
		s := t.String()
		if strings.Contains(s, inject.Marker) || strings.Contains(s, inject.RecoveryTag) {
			return true
		}
	}
	return false
}
