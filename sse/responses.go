package sse

import (
	"github.com/loopguard/loopguard/internal/rawjson"
	"slices"
)

// respItem is one output item of a Responses stream.
type respItem struct {
	index          int    // output_index
	typ, id        []byte // item type and id
	callID, name   []byte // function calls
	args, text     []byte // function call arguments; message output text
	raw            []byte // the item of output_item.done, as sent
	done, argsDone bool
}

// ResponsesAccumulator folds the events of a streamed OpenAI Responses API
// answer (POST /v1/responses with "stream": true): the response's id, model
// and status, every output item's text, and the function calls as they
// complete.
//
// The zero value is ready to use. Once the first events have sized its
// buffers, adding an event does not allocate, so an accumulator can be Reset
// and pooled. It is not safe for concurrent use.
type ResponsesAccumulator struct {
	id, model, status []byte
	createdAt         int64
	seq               int // highest sequence_number seen, 0 before any
	usage             Usage
	hasUsage          bool
	done              bool
	errRaw            []byte
	items             []respItem
}

// Reset empties a, keeping its buffers for reuse.
func (a *ResponsesAccumulator) Reset() {
	*a = ResponsesAccumulator{id: a.id[:0], model: a.model[:0], status: a.status[:0], errRaw: a.errRaw[:0], items: a.items[:0]}
}

// Add folds one event's data into a and returns what it added. The event
// name is not needed: every Responses payload carries its "type". Empty
// data is ignored; an "error" event (or a response.failed) returns
// ErrUpstream with the payload kept (see ErrorRaw); data that is not a JSON
// object returns ErrInvalidChunk and changes nothing. Add never keeps a
// reference to data.
func (a *ResponsesAccumulator) Add(data []byte) (Update, error) {
	var u Update
	err := a.AddTo(&u, data)
	return u, err
}

// AddTo is Add, writing the update into *u: an Update returned by value
// is copied through the frames of its callers, the stack of a relay that
// inspects its stream as it passes (docs/streams.md).
func (a *ResponsesAccumulator) AddTo(u *Update, data []byte) error {
	*u = Update{}
	u.ToolCallDone, u.ToolCallStarted, u.Sequence = -1, -1, a.seq
	s, err := objectView(data)
	if s == "" {
		return err
	}
	var typ, resp, item, delta, args, name, itemID, outIdx, seq string
	var it objIter // started in place (objIter.start)
	it.start(s, tapeAt{})
	for it.next() {
		switch it.key {
		case "type":
			typ = it.val
		case "response":
			resp = it.val
		case "item":
			item = it.val
		case "delta":
			delta = it.val
		case "arguments":
			args = it.val
		case "name":
			name = it.val
		case "item_id":
			itemID = it.val
		case "output_index":
			outIdx = it.val
		case "sequence_number":
			seq = it.val
		}
	}
	if n, ok := parseInt(seq); ok && n > a.seq {
		a.seq = n
	}
	if len(typ) < 2 {
		return nil
	}
	switch typ[1 : len(typ)-1] {
	case "response.created", "response.in_progress", "response.queued":
		a.response(resp)
	case "response.completed", "response.incomplete":
		a.response(resp)
		a.done, u.Done = true, true
	case "response.failed", "error":
		a.response(resp)
		a.done = typ != `"error"`
		a.errRaw = append(a.errRaw[:0], data...)
		return ErrUpstream
	case "response.output_item.added":
		a.itemEvent(outIdx, item, false, u)
	case "response.output_item.done":
		a.itemEvent(outIdx, item, true, u)
	case "response.output_text.delta":
		if ri := a.find(outIdx, itemID); ri != nil && isString(delta) {
			n := len(ri.text)
			ri.text = appendString(ri.text, delta)
			u.Text = ri.text[n:]
		}
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		if ri := a.find(outIdx, itemID); ri != nil && isString(delta) {
			// Reasoning items keep their text where messages keep theirs.
			n := len(ri.text)
			ri.text = appendString(ri.text, delta)
			u.Reasoning = ri.text[n:]
		}
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		if ri := a.find(outIdx, itemID); ri != nil && !ri.argsDone && isString(delta) {
			ri.args = appendString(ri.args, delta)
		}
	case "response.function_call_arguments.done", "response.custom_tool_call_input.done":
		if ri := a.find(outIdx, itemID); ri != nil && !ri.argsDone {
			if isString(args) {
				ri.args = appendString(ri.args[:0], args)
			}
			if len(ri.name) == 0 {
				ri.name = appendString(ri.name, name)
			}
			ri.argsDone = true
			u.ToolCallDone = a.callPos(ri)
		}
	}
	return nil
}

// response reads the response object of a lifecycle event.
func (a *ResponsesAccumulator) response(raw string) {
	it := newObjIter(raw)
	for it.next() {
		switch it.key {
		case "id":
			if len(a.id) == 0 {
				a.id = appendString(a.id, it.val)
			}
		case "model":
			if len(a.model) == 0 {
				a.model = appendString(a.model, it.val)
			}
		case "created_at":
			if a.createdAt == 0 {
				n, _ := parseInt(it.val)
				a.createdAt = int64(n)
			}
		case "status":
			if isString(it.val) {
				a.status = appendString(a.status[:0], it.val)
			}
		case "usage":
			a.addUsage(it.val)
		}
	}
}

func (a *ResponsesAccumulator) addUsage(raw string) {
	if !isObject(raw) {
		return
	}
	a.hasUsage = true
	a.usage = Usage{}
	it := newObjIter(raw)
	for it.next() {
		switch it.key {
		case "input_tokens":
			a.usage.PromptTokens, _ = parseInt(it.val)
		case "output_tokens":
			a.usage.CompletionTokens, _ = parseInt(it.val)
		case "total_tokens":
			a.usage.TotalTokens, _ = parseInt(it.val)
		}
	}
}

// itemEvent folds output_item.added (done false) or output_item.done.
func (a *ResponsesAccumulator) itemEvent(outIdx, item string, done bool, u *Update) {
	if !isObject(item) {
		return
	}
	var typ, id, callID, name, args, input string
	var it objIter
	it.start(item, tapeAt{})
	for it.next() {
		switch it.key {
		case "type":
			typ = it.val
		case "id":
			id = it.val
		case "call_id":
			callID = it.val
		case "name":
			name = it.val
		case "arguments":
			args = it.val
		case "input":
			input = it.val
		}
	}
	index, ok := parseInt(outIdx)
	if !ok {
		index = len(a.items)
	}
	ri := a.find(outIdx, id)
	if ri == nil {
		if len(a.items) >= maxToolCalls {
			return
		}
		a.items = slices.Grow(a.items, 1)[:len(a.items)+1]
		ri = &a.items[len(a.items)-1]
		// Field by field: a literal would be built on the stack first.
		ri.index, ri.typ, ri.id, ri.callID, ri.name = index, ri.typ[:0], ri.id[:0], ri.callID[:0], ri.name[:0]
		ri.args, ri.text, ri.raw, ri.done, ri.argsDone = ri.args[:0], ri.text[:0], ri.raw[:0], false, false
		ri.typ = appendString(ri.typ, typ)
		ri.id = appendString(ri.id, id)
		if ri.isCall() {
			u.ToolCallStarted = index
		}
	}
	if len(ri.callID) == 0 {
		ri.callID = appendString(ri.callID, callID)
	}
	if len(ri.name) == 0 {
		ri.name = appendString(ri.name, name)
	}
	if !done || ri.done {
		return
	}
	ri.done = true
	ri.raw = append(ri.raw[:0], item...)
	if !ri.isCall() {
		return
	}
	if !ri.argsDone {
		// The item is the authority: it holds the whole arguments.
		switch {
		case isString(args):
			ri.args = appendString(ri.args[:0], args)
		case isString(input):
			ri.args = appendString(ri.args[:0], input)
		}
		ri.argsDone = true
		u.ToolCallDone = a.callPos(ri)
	}
}

func (ri *respItem) isCall() bool {
	return string(ri.typ) == "function_call" || string(ri.typ) == "custom_tool_call"
}

// find returns the item an event refers to: by output_index, else by id.
func (a *ResponsesAccumulator) find(outIdx, id string) *respItem {
	if n, ok := parseInt(outIdx); ok {
		for i := len(a.items) - 1; i >= 0; i-- {
			if a.items[i].index == n {
				return &a.items[i]
			}
		}
		return nil
	}
	if !isString(id) {
		return nil
	}
	for i := len(a.items) - 1; i >= 0; i-- {
		if stringEqual(id, a.items[i].id) {
			return &a.items[i]
		}
	}
	return nil
}

// callPos is the position of a call item among the calls.
func (a *ResponsesAccumulator) callPos(ri *respItem) int { return callPos(a.items, ri) }

// ToolCallBytes returns the name and arguments so far of the function call
// at position pos (in the order the calls began), ok false if there is none.
// The slices alias a's buffers and are valid until the next Add or Reset.
func (a *ResponsesAccumulator) ToolCallBytes(pos int) (name, args []byte, ok bool) {
	if ri := nthCall(a.items, pos); ri != nil {
		return ri.name, ri.args, true
	}
	return nil, nil, false
}

// ToolCalls returns the function calls so far, in the order they began; ID
// is the call_id the agent answers with. The result is a fresh copy.
func (a *ResponsesAccumulator) ToolCalls() []ToolCall {
	var out []ToolCall
	for i := range a.items {
		ri := &a.items[i]
		if ri.isCall() {
			out = append(out, ToolCall{Index: ri.index, ID: string(ri.callID), Type: string(ri.typ), Name: string(ri.name), Arguments: string(ri.args)})
		}
	}
	return out
}

// Text returns the output text of every message item, joined in order.
func (a *ResponsesAccumulator) Text() string {
	var b []byte
	for i := range a.items {
		if string(a.items[i].typ) == "message" {
			b = append(b, a.items[i].text...)
		}
	}
	return string(b)
}

// ID returns the response id, from the first event that carried one.
func (a *ResponsesAccumulator) ID() string { return string(a.id) }

// Model returns the response's model.
func (a *ResponsesAccumulator) Model() string { return string(a.model) }

// CreatedAt returns the response's created_at (Unix seconds), 0 if unknown.
func (a *ResponsesAccumulator) CreatedAt() int64 { return a.createdAt }

// Status returns the last status reported ("in_progress", "completed",
// "incomplete", "failed").
func (a *ResponsesAccumulator) Status() string { return string(a.status) }

// Sequence returns the highest sequence_number seen; the next event loopguard
// writes (a cut tail) numbers itself from Sequence()+1.
func (a *ResponsesAccumulator) Sequence() int { return a.seq }

// Usage returns the usage of the final response (input_tokens as
// PromptTokens, output_tokens as CompletionTokens) and whether it had one.
func (a *ResponsesAccumulator) Usage() (Usage, bool) { return a.usage, a.hasUsage }

// Done reports whether a terminal event (response.completed, .incomplete
// or .failed) was added.
func (a *ResponsesAccumulator) Done() bool { return a.done }

// ErrorRaw returns the data of the last error event as received, nil if
// none. The slice is owned by a and valid until the next Reset.
func (a *ResponsesAccumulator) ErrorRaw() []byte {
	if len(a.errRaw) == 0 {
		return nil
	}
	return a.errRaw
}

// OpenMessage returns the message item still streaming: its output_index,
// id and text so far; ok is false when no message item is open. A cut tail
// closes it (see inject.ResponsesCut).
func (a *ResponsesAccumulator) OpenMessage() (index int, id, text []byte, ok bool) {
	if ri := a.openMessage(); ri != nil {
		return ri.index, ri.id, ri.text, true
	}
	return 0, nil, nil, false
}

// openMessage is the last message item not done, nil if none.
func (a *ResponsesAccumulator) openMessage() *respItem {
	for i := len(a.items) - 1; i >= 0; i-- {
		if ri := &a.items[i]; !ri.done && string(ri.typ) == "message" {
			return ri
		}
	}
	return nil
}

// DropText removes the last n bytes of the open message item's text (all
// of it when it has fewer): text held back from the client when a stream is
// cut (stream.tail = "trim") is not part of what OpenMessage and
// AppendOutput report afterwards. It does nothing when no message is open.
func (a *ResponsesAccumulator) DropText(n int) {
	if ri := a.openMessage(); ri != nil {
		ri.text = ri.text[:len(ri.text)-min(max(n, 0), len(ri.text))]
	}
}

// NextOutputIndex returns the output_index a new item would take.
func (a *ResponsesAccumulator) NextOutputIndex() int {
	n := 0
	for i := range a.items {
		n = max(n, a.items[i].index+1)
	}
	return n
}

// AppendOutput appends the response's output array so far as JSON: every
// completed item as the upstream sent it, and an open message item as a
// message of status "incomplete" holding the text streamed so far. Open
// calls and other open items are left out: their arguments are not whole.
// It is what a cut tail's final response object carries.
func (a *ResponsesAccumulator) AppendOutput(dst []byte) []byte {
	return a.AppendOutputBefore(dst, int(^uint(0)>>1))
}

// AppendOutputBefore is AppendOutput of the items whose output_index is
// below end: what a client was shown when the items from end on were held
// back from it.
func (a *ResponsesAccumulator) AppendOutputBefore(dst []byte, end int) []byte {
	dst = append(dst, '[')
	first := true
	for i := range a.items {
		ri := &a.items[i]
		switch {
		case ri.index >= end:
			continue
		case ri.done && len(ri.raw) > 0:
		case string(ri.typ) == "message":
		default:
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if ri.done {
			dst = append(dst, ri.raw...)
			continue
		}
		dst = appendOpenMessage(dst, ri.id, ri.text)
	}
	return append(dst, ']')
}

// appendOpenMessage appends an incomplete assistant message item with one
// output_text part.
func appendOpenMessage(dst, id, text []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = rawjson.AppendQuote(dst, rawjson.View(id))
	dst = append(dst, `,"type":"message","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":`...)
	dst = rawjson.AppendQuote(dst, rawjson.View(text))
	return append(dst, `,"annotations":[]}]}`...)
}
