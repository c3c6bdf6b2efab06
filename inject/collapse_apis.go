package inject

import (
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/tidwall/gjson"
)

// CollapseResponses is Collapse for a Responses API body: the history is
// "input", a turn is the run of assistant-side items of one response
// (reasoning, assistant message, function calls; calls' Message is the
// index of its first item, as inspect numbers steps), and its results are
// the function_call_output items with its call_ids. A removed turn takes
// every item of it along, so no call_id is left without its output and no
// output without its call; the note goes to the kept output.
func (in *Injector) CollapseResponses(body []byte, calls []inspect.CallRef) ([]byte, Collapsed, error) {
	arr := gjson.Get(rawjson.View(body), "input")
	if !arr.IsArray() || arr.Index <= 0 {
		return body, Collapsed{}, ErrNoInput
	}
	if len(calls) == 0 {
		return body, Collapsed{}, nil
	}
	h := history{key: "input", size: len(arr.Raw), unit: map[int]int{}, note: func(raw, text string) (splice, bool) {
		return memberSplice(0, raw, "output", "input_text", text)
	}}
	var turn *histMsg
	start, text := 0, false // the open turn's first byte in arr.Raw; whether it has a message
	i := 0
	arr.ForEach(func(_, v gjson.Result) bool {
		typ, role := v.Get("type").String(), v.Get("role").String()
		if typ == "" && role != "" {
			typ = "message"
		}
		call := typ == "function_call" || typ == "custom_tool_call" || typ == "local_shell_call"
		turnItem := call || typ == "reasoning" || typ == "message" && role == "assistant"
		from, to := v.Index-arr.Index, v.Index-arr.Index+len(v.Raw)
		if turn != nil && turnItem && (call || !text && len(turn.ids) == 0) {
			// The item joins the open turn, as inspect's steps take it.
			turn.raw, turn.items = arr.Raw[start:to], turn.items+1
		} else {
			m := histMsg{raw: v.Raw, role: role, items: 1}
			switch {
			case turnItem:
				m.role = "assistant"
			case isCallOutput(typ):
				m.role = "tool"
				m.answers = []string{itemCallID(v)}
			case role == "user":
				m.user = true
			}
			h.unit[i] = len(h.msgs)
			h.msgs = append(h.msgs, m)
			turn, start, text = nil, from, false
			if turnItem {
				turn = &h.msgs[len(h.msgs)-1]
			}
		}
		if turn != nil {
			if call {
				turn.ids = append(turn.ids, itemCallID(v))
			}
			text = text || typ == "message"
		}
		i++
		return true
	})
	return in.collapse(body, h, calls)
}

// itemCallID is the call id of a Responses call or call output item:
// call_id, or id for a local shell output that names its call so.
func itemCallID(v gjson.Result) string {
	if id := v.Get("call_id"); id.Exists() {
		return id.String()
	}
	return v.Get("id").String()
}

// CollapseAnthropic is Collapse for an Anthropic Messages body: a turn is
// an assistant message with tool_use blocks, its results the following
// user message made of tool_result blocks alone (a user message that also
// says something keeps its turn). A removed turn takes that message along,
// so every tool_use id left stays paired and user and assistant turns
// still alternate; the note is a text block after the kept results.
func (in *Injector) CollapseAnthropic(body []byte, calls []inspect.CallRef) ([]byte, Collapsed, error) {
	arr := gjson.Get(rawjson.View(body), "messages")
	if !arr.IsArray() {
		return body, Collapsed{}, ErrNoMessages
	}
	if len(calls) == 0 {
		return body, Collapsed{}, nil
	}
	h := history{key: "messages", size: len(arr.Raw), note: func(raw, text string) (splice, bool) {
		return memberSplice(0, raw, "content", "text", text)
	}}
	arr.ForEach(func(_, v gjson.Result) bool {
		m := histMsg{raw: v.Raw, role: v.Get("role").String(), items: 1}
		results := m.role == "user"
		v.Get("content").ForEach(func(_, b gjson.Result) bool {
			switch b.Get("type").String() {
			case "tool_use":
				m.ids = append(m.ids, b.Get("id").String())
			case "tool_result":
				m.answers = append(m.answers, b.Get("tool_use_id").String())
			default:
				results = false
			}
			return true
		})
		if m.role == "user" {
			m.user = true
			if results && len(m.answers) > 0 {
				m.role = "tool"
			}
		}
		h.msgs = append(h.msgs, m)
		return true
	})
	return in.collapse(body, h, calls)
}
