package ndjson

import (
	"errors"
	"strconv"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/sse"
)

// ErrNotObject reports a line that is not a JSON object.
var ErrNotObject = errors.New("ndjson: line is not a JSON object")

// Update is what one line of an Ollama answer added to it. Its slices
// alias the accumulator's buffers until the next Add.
type Update struct {
	// Text is the content (/api/chat's message.content, /api/generate's
	// response) the line added, decoded; Reasoning its thinking.
	Text, Reasoning []byte
	// CallStarted is the position of the first tool call the line
	// carried, -1 if none; Calls how many it carried. Ollama sends each
	// call whole, in one line.
	CallStarted, Calls int
	// Done: the line is the answer's last ("done": true).
	Done bool
}

// Ollama accumulates a streamed Ollama answer, /api/chat's or
// /api/generate's, line by line: what a proxy needs to watch it and end it
// in its own shape. The zero value is ready; Reset empties it for reuse.
type Ollama struct {
	model, createdAt []byte
	generate         bool // the lines carry "response", not "message"
	text, reasoning  []byte
	calls            []ollamaCall
	usage            sse.Usage
	usageSet         bool
	done             bool
	doneReason       []byte
}

type ollamaCall struct{ name, args []byte }

// Add folds one line's JSON object into the answer and returns what it
// added. A line that is not an object (an {"error": ...} line is one, and
// is read as one that adds nothing) returns ErrNotObject and changes
// nothing.
func (a *Ollama) Add(line []byte) (Update, error) {
	u := Update{CallStarted: -1}
	if !rawjson.Valid(line) {
		return u, ErrNotObject
	}
	s := rawjson.View(line)
	if i := rawjson.SkipSpace(s, 0); i >= len(s) || s[i] != '{' {
		return u, ErrNotObject
	}
	a.text, a.reasoning = a.text[:0], a.reasoning[:0]
	rawjson.MembersWith(s, func(k string, at int) int {
		end := rawjson.ValueEnd(s, at)
		v := s[at:end]
		switch k {
		case "model":
			if len(a.model) == 0 {
				a.model = appendString(a.model[:0], v)
			}
		case "created_at":
			a.createdAt = appendString(a.createdAt[:0], v)
		case "message":
			a.message(v, &u)
		case "response":
			a.generate = true
			a.text = appendString(a.text, v)
		case "thinking":
			a.reasoning = appendString(a.reasoning, v)
		case "done":
			u.Done = v == "true"
			a.done = a.done || u.Done
		case "done_reason":
			a.doneReason = appendString(a.doneReason[:0], v)
		case "prompt_eval_count":
			a.usage.PromptTokens, a.usageSet = atoi(v), true
		case "eval_count":
			a.usage.CompletionTokens, a.usageSet = atoi(v), true
		}
		return end
	})
	a.usage.TotalTokens = a.usage.PromptTokens + a.usage.CompletionTokens
	u.Text, u.Reasoning = a.text, a.reasoning
	return u, nil
}

// message reads /api/chat's message object: content, thinking, tool_calls.
func (a *Ollama) message(m string, u *Update) {
	rawjson.MembersWith(m, func(k string, at int) int {
		end := rawjson.ValueEnd(m, at)
		v := m[at:end]
		switch k {
		case "content":
			a.text = appendString(a.text, v)
		case "thinking":
			a.reasoning = appendString(a.reasoning, v)
		case "tool_calls":
			if len(v) > 0 && v[0] == '[' {
				a.toolCalls(v, u)
			}
		}
		return end
	})
}

// toolCalls adds each {"function":{"name","arguments"}} of a line's
// tool_calls.
func (a *Ollama) toolCalls(arr string, u *Update) {
	for i := rawjson.SkipSpace(arr, 1); i < len(arr) && arr[i] != ']'; {
		end := rawjson.ValueEnd(arr, i)
		if end <= i {
			return
		}
		var c ollamaCall
		rawjson.MembersWith(arr[i:end], func(k string, at int) int {
			tc := arr[i:end]
			fend := rawjson.ValueEnd(tc, at)
			if k == "function" {
				fn := tc[at:fend]
				rawjson.MembersWith(fn, func(k string, at int) int {
					vend := rawjson.ValueEnd(fn, at)
					switch k {
					case "name":
						c.name = appendString(nil, fn[at:vend])
					case "arguments":
						if fn[at] == '"' {
							c.args = appendString(nil, fn[at:vend])
						} else {
							c.args = append([]byte(nil), fn[at:vend]...)
						}
					}
					return vend
				})
			}
			return fend
		})
		if u.CallStarted < 0 {
			u.CallStarted = len(a.calls)
		}
		u.Calls++
		a.calls = append(a.calls, c)
		if i = rawjson.SkipSpace(arr, end); i < len(arr) && arr[i] == ',' {
			i = rawjson.SkipSpace(arr, i+1)
		}
	}
}

// appendString appends a raw JSON string's value, decoded; nothing for
// another kind.
func appendString(dst []byte, v string) []byte {
	if len(v) < 2 || v[0] != '"' {
		return dst
	}
	return rawjson.AppendUnescaped(dst, v[1:len(v)-1])
}

func atoi(v string) int {
	n, _ := strconv.Atoi(v)
	return n
}

// ToolCall returns the name and arguments (a JSON object's text) of the
// answer's pos-th tool call.
func (a *Ollama) ToolCall(pos int) (name, args []byte, ok bool) {
	if pos < 0 || pos >= len(a.calls) {
		return nil, nil, false
	}
	return a.calls[pos].name, a.calls[pos].args, true
}

// Calls is the number of tool calls so far.
func (a *Ollama) Calls() int { return len(a.calls) }

// Usage returns the counts of the final line, ok false before it.
func (a *Ollama) Usage() (sse.Usage, bool) { return a.usage, a.usageSet }

// Model and CreatedAt are the last line's, nil before the first.
func (a *Ollama) Model() []byte     { return a.model }
func (a *Ollama) CreatedAt() []byte { return a.createdAt }

// Generate reports an /api/generate answer: its lines carry "response".
func (a *Ollama) Generate() bool { return a.generate }

// Done reports that the final line was read.
func (a *Ollama) Done() bool { return a.done }

// Reset empties the accumulator, keeping small buffers.
func (a *Ollama) Reset() {
	*a = Ollama{model: a.model[:0], createdAt: a.createdAt[:0], text: a.text[:0], reasoning: a.reasoning[:0],
		calls: a.calls[:0], doneReason: a.doneReason[:0]}
}
