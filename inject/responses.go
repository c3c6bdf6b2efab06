package inject

import (
	"encoding/hex"
	"errors"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// ErrNoInput reports a Responses API body without an input to patch.
var ErrNoInput = errors.New("inject: request has no input")

// editTexts renders an Edit's texts in Apply's order; reset is the number
// of turns its collapses removed, for the reset="N" of collapsing loops.
func (in *Injector) editTexts(e Edit, reset int) ([]string, error) {
	var texts []string
	if e.Degenerated != nil {
		t, err := in.Degenerated(*e.Degenerated)
		if err != nil {
			return nil, err
		}
		texts = append(texts, t)
	}
	for _, l := range e.Constraints {
		if l.Collapse {
			l.Reset = reset
		}
		t, err := in.Constraint(l)
		if err != nil {
			return nil, err
		}
		texts = append(texts, t)
	}
	for _, l := range e.Warnings {
		t, err := in.Warning(l)
		if err != nil {
			return nil, err
		}
		texts = append(texts, t)
	}
	return texts, nil
}

// collapseCalls are the calls of every collapsing loop of e: one collapse
// over all of them, because the evidence's indices refer to the original
// body, so collapsing loop by loop would read the second loop's indices
// against a shortened history.
func collapseCalls(e Edit) []inspect.CallRef {
	var calls []inspect.CallRef
	for _, l := range e.Constraints {
		if l.Collapse {
			calls = append(calls, evidence(l.Verdict).Calls...)
		}
	}
	return calls
}

// ApplyResponses is Apply for a Responses API body (POST /v1/responses):
// first the collapses the edit asks for (see CollapseResponses), then one
// insertion of the edit's texts at the placement configured for the
// request's model (see InsertResponses). On error the caller sends the
// original body (fail open); body is not modified.
func (in *Injector) ApplyResponses(body []byte, e Edit) (Result, error) {
	return in.applyTexts(body, e, in.CollapseResponses, InsertResponses)
}

func (in *Injector) applyTexts(body []byte, e Edit, collapse func([]byte, []inspect.CallRef) ([]byte, Collapsed, error),
	insert func([]byte, Placement, string) ([]byte, Placement, error)) (Result, error) {
	res := Result{Body: body}
	if calls := collapseCalls(e); len(calls) > 0 {
		nb, c, err := collapse(body, calls)
		if err != nil {
			return Result{Body: body}, err
		}
		res.Body, res.Collapsed = nb, c
	}
	texts, err := in.editTexts(e, res.Collapsed.Turns)
	if err != nil {
		return Result{Body: body}, err
	}
	if len(texts) == 0 {
		return res, nil
	}
	model := e.Model
	if model == "" {
		model = gjson.Get(rawjson.View(res.Body), "model").String()
	}
	nb, used, err := insert(res.Body, in.Placement(model), strings.Join(texts, "\n\n"))
	if err != nil {
		return Result{Body: body}, err
	}
	res.Body, res.Placement = nb, used
	return res, nil
}

// InsertResponses adds text to a Responses API body and returns the new body
// and the placement used:
//
//   - Tool appends to the output of the last function_call_output (custom
//     and local shell outputs too): after a blank line to a string output,
//     as an input_text part to an array output;
//   - User appends to a trailing user message item (or to a string input),
//     else adds an input item {"role":"user","content":text};
//   - System appends to "instructions", adding it when absent;
//   - Auto is Tool when the input ends with a call output, else User.
//
// Only the insertion point changes; every other byte is kept.
func InsertResponses(body []byte, p Placement, text string) ([]byte, Placement, error) {
	b := rawjson.View(body)
	if !rawjson.Valid(body) || !gjson.Parse(b).IsObject() {
		return nil, "", ErrMalformed
	}
	input := gjson.Get(b, "input")
	if p == System {
		return insertField(body, "instructions", text), System, nil
	}
	if !input.Exists() || input.Index <= 0 {
		return nil, "", ErrNoInput
	}
	if input.Type == gjson.String {
		// A string input is one user message: extend it.
		at := input.Index + len(input.Raw) - 1
		ins := rawjson.AppendEscaped(rawjson.AppendEscaped(nil, "\n\n"), text)
		return splice{start: at, end: at, ins: ins}.apply(body), User, nil
	}
	if !input.IsArray() {
		return nil, "", ErrMalformed
	}
	var last, lastOut gjson.Result
	n := 0
	input.ForEach(func(_, v gjson.Result) bool {
		n++
		last = v
		if isCallOutput(v.Get("type").String()) {
			lastOut = v
		}
		return true
	})
	if (p == Tool || p == Auto || p == "") && lastOut.Exists() && (p == Tool || last.Index == lastOut.Index) {
		if sp, ok := appendMember(body, lastOut.Index, lastOut, "output", "input_text", text); ok {
			return sp.apply(body), Tool, nil
		}
	}
	if p != Tool && p != User && p != Auto && p != "" {
		return nil, "", errors.New("inject: unknown placement " + string(p))
	}
	if n > 0 && last.Get("role").String() == "user" && last.Get("type").String() != "function_call_output" {
		if sp, ok := appendMember(body, last.Index, last, "content", "input_text", text); ok {
			return sp.apply(body), User, nil
		}
	}
	msg := append([]byte(`{"role":"user","content":`), rawjson.AppendQuote(nil, text)...)
	msg = append(msg, '}')
	at := input.Index + len(input.Raw) - 1 // the closing ']'
	if n > 0 {
		msg = append([]byte{','}, msg...)
	}
	return splice{start: at, end: at, ins: msg}.apply(body), User, nil
}

func isCallOutput(typ string) bool {
	return typ == "function_call_output" || typ == "custom_tool_call_output" || typ == "local_shell_call_output"
}

// appendMember appends text to the member key of the object obj found at
// offset at of body: to a string after a blank line, to an array as a
// {"type":partType,"text":text} part, to a null or absent member by setting
// it. It reports false for a member of any other type.
func appendMember(body []byte, at int, obj gjson.Result, key, partType, text string) (splice, bool) {
	if at <= 0 || at >= len(body) || body[at] != '{' {
		return splice{}, false // gjson could not place the object
	}
	return memberSplice(at, obj.Raw, key, partType, text)
}

// memberSplice is appendMember for the object raw at offset at.
func memberSplice(at int, raw, key, partType, text string) (splice, bool) {
	// Get on the raw text: offsets relative to the object, added to at.
	c := gjson.Get(raw, key)
	switch {
	case !c.Exists():
		ins := append(append(append([]byte{'"'}, key...), `":`...), rawjson.AppendQuote(nil, text)...)
		if hasMembers(raw) {
			ins = append(ins, ',')
		}
		return splice{start: at + 1, end: at + 1, ins: ins}, true
	case c.Index <= 0:
		return splice{}, false
	case c.Type == gjson.Null:
		start := at + c.Index
		return splice{start: start, end: start + len(c.Raw), ins: rawjson.AppendQuote(nil, text)}, true
	case c.Type == gjson.String:
		end := at + c.Index + len(c.Raw) - 1
		ins := make([]byte, 0, len(text)+8)
		if len(c.Raw) > 2 {
			ins = rawjson.AppendEscaped(ins, "\n\n")
		}
		return splice{start: end, end: end, ins: rawjson.AppendEscaped(ins, text)}, true
	case c.IsArray():
		end := at + c.Index + len(c.Raw) - 1
		ins := make([]byte, 0, len(text)+40)
		if hasMembers(c.Raw) {
			ins = append(ins, ',')
		}
		ins = append(ins, `{"type":"`...)
		ins = append(ins, partType...)
		ins = append(ins, `","text":`...)
		ins = rawjson.AppendQuote(ins, text)
		return splice{start: end, end: end, ins: append(ins, '}')}, true
	}
	return splice{}, false
}

// insertField appends text to a top-level string field of the body (after
// a blank line), or sets the field when it is absent, null or not a string
// (only instructions and system are used, and neither is ever an object we
// would lose: a system array is handled by the caller).
func insertField(body []byte, key, text string) []byte {
	root := gjson.Parse(rawjson.View(body))
	f := root.Get(key)
	switch {
	case f.Type == gjson.String && f.Index > 0:
		at := f.Index + len(f.Raw) - 1
		ins := make([]byte, 0, len(text)+8)
		if len(f.Raw) > 2 {
			ins = rawjson.AppendEscaped(ins, "\n\n")
		}
		return splice{start: at, end: at, ins: rawjson.AppendEscaped(ins, text)}.apply(body)
	case f.Exists() && f.Index > 0:
		return splice{start: f.Index, end: f.Index + len(f.Raw), ins: rawjson.AppendQuote(nil, text)}.apply(body)
	}
	at := root.Index + strings.IndexByte(root.Raw, '{') + 1
	ins := append(append(append([]byte{'"'}, key...), `":`...), rawjson.AppendQuote(nil, text)...)
	if hasMembers(root.Raw) {
		ins = append(ins, ',')
	}
	return splice{start: at, end: at, ins: ins}.apply(body)
}

// hexID returns prefix + 24 hex digits from the injector's id source.
func (in *Injector) hexID(prefix string) string {
	var r [12]byte
	if _, err := io.ReadFull(in.random, r[:]); err != nil {
		return prefix + strconv.FormatInt(in.now().UnixNano(), 16)
	}
	return prefix + hex.EncodeToString(r[:])
}

// TerminateResponses is Terminate for a Responses API request: HTTP 200
// with a response object (status "completed") whose one output item is an
// assistant message starting with LOOP_DETECTED:, or for a streaming
// request its events (response.created, .in_progress, output_item.added,
// content_part.added, output_text.delta/.done, content_part.done,
// output_item.done, response.completed). With terminate_as = "error" it is
// the same OpenAI-shaped error as Terminate's.
func (in *Injector) TerminateResponses(body []byte, l Loop) (Response, error) {
	content, err := in.TerminateText(l)
	if err != nil {
		return Response{}, err
	}
	if in.cfg.TerminateAs == AsError {
		typ, code := errorKind(l)
		return in.errorAnswer(ErrorBody(content, typ, code)), nil
	}
	req := gjson.GetMany(rawjson.View(body), "model", "stream")
	r := responseObject{
		id: in.hexID("resp_loopguard_"), msgID: in.hexID("msg_loopguard_"),
		created: in.now().Unix(), model: req[0].String(),
	}
	if r.model == "" {
		r.model = "loopguard"
	}
	if req[1].Bool() {
		return Response{
			Status: http.StatusOK,
			Header: []Header{{"Content-Type", contentSSE}, {"Cache-Control", "no-cache"}},
			Body:   r.appendStream(nil, content),
		}, nil
	}
	r.status, r.output = "completed", appendMessageItem(nil, r.msgID, "completed", content)
	return Response{
		Status: http.StatusOK,
		Header: []Header{{"Content-Type", contentJSON}},
		Body:   r.appendJSON(nil),
	}, nil
}

// responseObject is a Responses API response loopguard writes.
type responseObject struct {
	id, msgID, model, status string
	created                  int64
	output                   []byte // the output items, without brackets
	incomplete               bool   // incomplete_details: max_output_tokens
	usage                    string // "" means zero usage
}

const zeroResponsesUsage = `{"input_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens":0,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0}`

// appendJSON appends the response object with the members the official
// clients read; fields loopguard has no value for are null.
func (r responseObject) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = rawjson.AppendQuote(b, r.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, r.created, 10)
	b = append(b, `,"status":`...)
	b = rawjson.AppendQuote(b, r.status)
	b = append(b, `,"error":null,"incomplete_details":`...)
	if r.incomplete {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":null,"max_output_tokens":null,"model":`...)
	b = rawjson.AppendQuote(b, r.model)
	b = append(b, `,"output":[`...)
	b = append(b, r.output...)
	b = append(b, `],"parallel_tool_calls":true,"previous_response_id":null,"temperature":null,"tool_choice":"auto","tools":[],"top_p":null,"usage":`...)
	if r.status == "in_progress" {
		b = append(b, "null"...)
	} else if r.usage != "" {
		b = append(b, r.usage...)
	} else {
		b = append(b, zeroResponsesUsage...)
	}
	return append(b, '}')
}

// appendMessageItem appends an assistant message item with one output_text
// part (no part when text is "" and the item is in progress).
func appendMessageItem(b []byte, id, status, text string) []byte {
	b = append(b, `{"id":`...)
	b = rawjson.AppendQuote(b, id)
	b = append(b, `,"type":"message","status":`...)
	b = rawjson.AppendQuote(b, status)
	b = append(b, `,"role":"assistant","content":[`...)
	if status != "in_progress" {
		b = append(b, `{"type":"output_text","text":`...)
		b = rawjson.AppendQuote(b, text)
		b = append(b, `,"annotations":[]}`...)
	}
	return append(b, "]}"...)
}

// sseEvents writes Responses API events with increasing sequence numbers.
type sseEvents struct {
	b   []byte
	seq int
}

// event appends "event: typ" and a data line whose JSON is
// {"type":typ,"sequence_number":n,<members>}.
func (s *sseEvents) event(typ string, members func(b []byte) []byte) {
	s.b = append(s.b, "event: "...)
	s.b = append(s.b, typ...)
	s.b = append(s.b, "\ndata: {\"type\":\""...)
	s.b = append(s.b, typ...)
	s.b = append(s.b, `","sequence_number":`...)
	s.b = strconv.AppendInt(s.b, int64(s.seq), 10)
	s.seq++
	s.b = members(s.b)
	s.b = append(s.b, "}\n\n"...)
}

// closeMessage appends the events that finish a message item whose text
// has been streamed: output_text.done, content_part.done, output_item.done.
func (s *sseEvents) closeMessage(index int, id, status, text string) {
	head := func(b []byte) []byte {
		b = append(b, `,"item_id":`...)
		b = rawjson.AppendQuote(b, id)
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(index), 10)
		return append(b, `,"content_index":0`...)
	}
	s.event("response.output_text.done", func(b []byte) []byte {
		b = append(head(b), `,"text":`...)
		b = rawjson.AppendQuote(b, text)
		return append(b, `,"logprobs":[]`...)
	})
	s.event("response.content_part.done", func(b []byte) []byte {
		b = append(head(b), `,"part":{"type":"output_text","text":`...)
		b = rawjson.AppendQuote(b, text)
		return append(b, `,"annotations":[]}`...)
	})
	s.event("response.output_item.done", func(b []byte) []byte {
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(index), 10)
		b = append(b, `,"item":`...)
		return appendMessageItem(b, id, status, text)
	})
}

func (r responseObject) appendStream(b []byte, content string) []byte {
	s := sseEvents{b: b}
	r.status = "in_progress"
	for _, typ := range []string{"response.created", "response.in_progress"} {
		s.event(typ, func(b []byte) []byte { return r.appendJSON(append(b, `,"response":`...)) })
	}
	s.message(0, r.msgID, content)
	r.status, r.output = "completed", appendMessageItem(nil, r.msgID, "completed", content)
	s.event("response.completed", func(b []byte) []byte { return r.appendJSON(append(b, `,"response":`...)) })
	return s.b
}

// message appends the events of a whole assistant message item at output
// index: output_item.added, content_part.added, one output_text.delta with
// text, and the done events.
func (s *sseEvents) message(index int, id, text string) {
	s.event("response.output_item.added", func(b []byte) []byte {
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(index), 10)
		b = append(b, `,"item":`...)
		return appendMessageItem(b, id, "in_progress", "")
	})
	head := func(b []byte) []byte {
		b = append(b, `,"item_id":`...)
		b = rawjson.AppendQuote(b, id)
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(index), 10)
		return append(b, `,"content_index":0`...)
	}
	s.event("response.content_part.added", func(b []byte) []byte {
		return append(head(b), `,"part":{"type":"output_text","text":"","annotations":[]}`...)
	})
	s.event("response.output_text.delta", func(b []byte) []byte {
		b = append(head(b), `,"delta":`...)
		b = rawjson.AppendQuote(b, text)
		return append(b, `,"logprobs":[]`...)
	})
	s.closeMessage(index, id, "completed", text)
}

// ResponsesCut is what the tail of a cut Responses stream needs to know
// about the stream so far; the proxy fills it from sse.ResponsesAccumulator.
type ResponsesCut struct {
	// Category names the rule that cut, for the SSE comment.
	Category string
	// ID, Model and CreatedAt are the response's (ID(), Model(),
	// CreatedAt()).
	ID, Model string
	CreatedAt int64
	// Sequence is the last sequence_number forwarded (Sequence()).
	Sequence int
	// Open is the message item still streaming (OpenMessage()), nil if none.
	Open *OpenMessage
	// Answer is a message item loopguard adds whole after the output so far
	// (the LOOP_DETECTED answer in place of a held tool call), nil if none.
	Answer *OpenMessage
	// Output is the response's output array so far (AppendOutput), the open
	// message included; nil means [].
	Output []byte
	// Usage is the usage object to report, "" for zero usage. Token counts
	// of a cut stream are loopguard's estimate at best.
	Usage string
	// Incomplete ends the stream with response.incomplete (status
	// "incomplete", reason max_output_tokens) instead of response.completed.
	// Agents built on the Agents SDK or Codex treat a missing
	// response.completed as a failed turn and retry it, so completed is the
	// default.
	Incomplete bool
}

// OpenMessage is a message item whose text was streaming when the cut came,
// or one loopguard adds (ResponsesCut.Answer).
type OpenMessage struct {
	Index int    // output_index
	ID    string // item id
	Text  string // the text forwarded so far
}

// AppendResponsesCut appends the events that end a cut Responses stream
// well-formed: a comment ": loopguard cut category=...", the done events of
// the open message item (its status "incomplete"), the answer item if any,
// and response.completed
// (or response.incomplete) carrying the output so far. The proxy then
// closes the upstream connection.
func AppendResponsesCut(dst []byte, c ResponsesCut) []byte {
	dst = append(dst, ": loopguard cut category="...)
	dst = append(dst, c.Category...)
	dst = append(dst, "\n\n"...)
	s := sseEvents{b: dst, seq: c.Sequence + 1}
	if c.Open != nil {
		s.closeMessage(c.Open.Index, c.Open.ID, "incomplete", c.Open.Text)
	}
	r := responseObject{id: c.ID, model: c.Model, created: c.CreatedAt, status: "completed", usage: c.Usage}
	if len(c.Output) >= 2 {
		r.output = c.Output[1 : len(c.Output)-1]
	}
	if a := c.Answer; a != nil {
		s.message(a.Index, a.ID, a.Text)
		if len(r.output) > 0 {
			r.output = append(r.output[:len(r.output):len(r.output)], ',')
		}
		r.output = appendMessageItem(r.output, a.ID, "completed", a.Text)
	}
	typ := "response.completed"
	if c.Incomplete {
		r.status, r.incomplete, typ = "incomplete", true, "response.incomplete"
	}
	s.event(typ, func(b []byte) []byte { return r.appendJSON(append(b, `,"response":`...)) })
	return s.b
}
