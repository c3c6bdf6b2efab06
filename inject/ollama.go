package inject

import (
	"strconv"

	"github.com/loopguard/loopguard/inspect"
	"net/http"
	"time"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/tidwall/gjson"
)

// ContentNDJSON is the content type of Ollama's streamed answers: one JSON
// object a line.
const ContentNDJSON = "application/x-ndjson"

// TerminateOllama answers an Ollama /api/chat request without calling the
// model. Ollama streams unless the request says "stream": false, so an
// absent stream member gets NDJSON lines: the LOOP_DETECTED message, then
// the final line with "done": true. A non-streamed request gets one object,
// {"model","created_at","message":{"role":"assistant","content":...},
// "done":true,"done_reason":"stop"}. With terminate_as = "error" it is
// Ollama's error shape, {"error": "LOOP_DETECTED: ..."}, with
// Config.ErrorStatus, as Ollama answers errors before a stream starts.
func (in *Injector) TerminateOllama(body []byte, l Loop) (Response, error) {
	content, model, streamed, done, err := in.ollamaEnd(body, l)
	if done != nil || err != nil {
		return *done, err
	}
	at := in.now().UTC().Format(time.RFC3339Nano)
	if !streamed {
		b := AppendOllamaLine(nil, model, at, content, "stop")
		return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", contentJSON}}, Body: b[:len(b)-1]}, nil
	}
	b := AppendOllamaLine(nil, model, at, content, "")
	b = AppendOllamaLine(b, model, at, "", "stop")
	return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", ContentNDJSON}}, Body: b}, nil
}

// AppendOllamaLine appends one line of an Ollama chat answer, newline
// included: an assistant message with content, final ("done": true, with
// doneReason) when doneReason is not empty. The proxy ends a cut stream
// with such a final line.
func AppendOllamaLine(b []byte, model, createdAt, content, doneReason string) []byte {
	b = append(b, `{"model":`...)
	b = rawjson.AppendQuote(b, model)
	b = append(b, `,"created_at":`...)
	b = rawjson.AppendQuote(b, createdAt)
	b = append(b, `,"message":{"role":"assistant","content":`...)
	b = rawjson.AppendQuote(b, content)
	if doneReason == "" {
		return append(b, "},\"done\":false}\n"...)
	}
	b = append(b, `},"done":true,"done_reason":`...)
	b = rawjson.AppendQuote(b, doneReason)
	return append(b, "}\n"...)
}

// TerminateOllamaGenerate is TerminateOllama for /api/generate, whose
// answers carry "response" in place of a message. loopguard judges no
// history there, so it answers so only where a policy ends a session as a
// whole.
func (in *Injector) TerminateOllamaGenerate(body []byte, l Loop) (Response, error) {
	content, model, streamed, done, err := in.ollamaEnd(body, l)
	if done != nil || err != nil {
		return *done, err
	}
	b := append([]byte(`{"model":`), rawjson.AppendQuote(nil, model)...)
	b = append(b, `,"created_at":`...)
	b = rawjson.AppendQuote(b, in.now().UTC().Format(time.RFC3339Nano))
	b = append(b, `,"response":`...)
	b = rawjson.AppendQuote(b, content)
	b = append(b, `,"done":true,"done_reason":"stop"}`...)
	if !streamed {
		return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", contentJSON}}, Body: b}, nil
	}
	return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", ContentNDJSON}}, Body: append(b, '\n')}, nil
}

// ollamaEnd reads what both of Ollama's LOOP_DETECTED answers need: the
// text, the request's model and whether it streams (Ollama streams unless
// told "stream": false). done is the whole answer when it is an error
// (terminate_as = "error").
func (in *Injector) ollamaEnd(body []byte, l Loop) (content, model string, streamed bool, done *Response, err error) {
	content, err = in.TerminateText(l)
	if err != nil {
		return "", "", false, &Response{}, err
	}
	if in.cfg.TerminateAs == AsError {
		b := append([]byte(`{"error":`), rawjson.AppendQuote(nil, content)...)
		r := in.errorAnswer(append(b, '}'))
		return "", "", false, &r, nil
	}
	req := gjson.GetMany(rawjson.View(body), "model", "stream")
	model = req[0].String()
	if model == "" {
		model = "loopguard"
	}
	return content, model, !req[1].Exists() || req[1].Bool(), nil, nil
}

// ApplyOllama is Apply for an Ollama /api/chat body: its messages take
// warnings as chat's do, and its collapse pairs calls and results as
// Ollama does (CollapseOllama).
func (in *Injector) ApplyOllama(body []byte, e Edit) (Result, error) {
	layout := e.Layout
	if len(collapseCalls(e)) > 0 {
		layout = inspect.Layout{} // the collapse moves the messages
	}
	return in.applyTexts(body, e, in.CollapseOllama, func(b []byte, p Placement, text string) ([]byte, Placement, error) {
		return insert(e.Dst, b, p, text, layout)
	})
}

// CollapseOllama is Collapse for an Ollama /api/chat body, whose calls
// often carry no id and whose results name their tool (tool_name) rather
// than a call: a call without an id is known by its place in its message,
// and a result without a tool_call_id answers the earliest unanswered call
// of its tool in the turn before it (else the earliest unanswered one), as
// inspect pairs them. A removed turn takes its results along, so every
// result left still follows its call.
func (in *Injector) CollapseOllama(body []byte, calls []inspect.CallRef) ([]byte, Collapsed, error) {
	arr := gjson.Get(rawjson.View(body), "messages")
	if !arr.IsArray() {
		return body, Collapsed{}, ErrNoMessages
	}
	if len(calls) == 0 {
		return body, Collapsed{}, nil
	}
	h := history{key: "messages", size: len(arr.Raw), note: func(raw, text string) (splice, bool) { return appendContent(message{raw: raw}, text) }}
	var names [][]string // per message, the names of its calls
	type open struct {
		id, name string
		done     bool
	}
	var turn []open // the latest assistant turn's calls
	i := 0
	arr.ForEach(func(_, v gjson.Result) bool {
		m := histMsg{raw: v.Raw, role: v.Get("role").String(), items: 1}
		var ns []string
		switch m.role {
		case "assistant":
			turn = turn[:0]
			k := 0
			v.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
				id := tc.Get("id").String()
				if id == "" {
					id = ollamaCallID(i, k)
				}
				name := tc.Get("function.name").String()
				m.ids = append(m.ids, id)
				ns = append(ns, name)
				turn = append(turn, open{id: id, name: name})
				k++
				return true
			})
		case "tool":
			id := v.Get("tool_call_id").String()
			if id == "" {
				name := v.Get("tool_name").String()
				pick := -1
				for j := range turn {
					if !turn[j].done && (turn[j].name == name || pick < 0) {
						if pick = j; turn[j].name == name {
							break
						}
					}
				}
				if pick >= 0 {
					id = turn[pick].id
				}
			}
			for j := range turn {
				if turn[j].id == id {
					turn[j].done = true
				}
			}
			m.answers = []string{id}
		case "user":
			m.user = true
		}
		h.msgs = append(h.msgs, m)
		names = append(names, ns)
		i++
		return true
	})
	// A call inspect knows without an id is named by its place.
	refs := make([]inspect.CallRef, 0, len(calls))
	used := map[string]bool{}
	for _, c := range calls {
		if c.ToolCallID == "" && c.Message >= 0 && c.Message < len(names) {
			for k, n := range names[c.Message] {
				if id := h.msgs[c.Message].ids[k]; n == c.Name && !used[id] {
					c.ToolCallID, used[id] = id, true
					break
				}
			}
		}
		refs = append(refs, c)
	}
	return in.collapse(body, h, refs)
}

// ollamaCallID names the k-th call of message i, which has no id, for the
// collapse: no id a client sends starts with a NUL.
func ollamaCallID(i, k int) string { return "\x00" + strconv.Itoa(i) + "." + strconv.Itoa(k) }
