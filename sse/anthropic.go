package sse

import (
	"slices"
)

// block is one content block of an Anthropic message stream.
type block struct {
	index         int
	typ, id, name []byte
	text          []byte // text, thinking, or the tool input JSON
	start         []byte // the tool input of content_block_start ("{}" mostly)
	partial, open bool   // an input_json_delta arrived; the block is not stopped
}

// AnthropicAccumulator folds the events of a streamed Anthropic Messages
// answer (POST /v1/messages with "stream": true, as Anthropic, llama.cpp,
// vLLM and Ollama send it): the message's id and model, every content
// block's text, and the tool_use blocks as they complete.
//
// The zero value is ready to use. Once the first events have sized its
// buffers, adding an event does not allocate, so an accumulator can be Reset
// and pooled. It is not safe for concurrent use.
type AnthropicAccumulator struct {
	id, model, stop []byte
	usage           Usage
	hasUsage        bool
	done            bool
	errRaw          []byte
	blocks          []block
}

// Reset empties a, keeping its buffers for reuse.
func (a *AnthropicAccumulator) Reset() {
	*a = AnthropicAccumulator{id: a.id[:0], model: a.model[:0], stop: a.stop[:0], errRaw: a.errRaw[:0], blocks: a.blocks[:0]}
}

// Add folds one event's data into a and returns what it added. Every Anthropic payload carries its "type", so the event name is
// not needed. Empty data and ping are ignored; an error event returns
// ErrUpstream with the payload kept (see ErrorRaw); data that is not a JSON
// object returns ErrInvalidChunk and changes nothing. Add never keeps a
// reference to data.
func (a *AnthropicAccumulator) Add(data []byte) (Update, error) {
	var u Update
	err := a.AddTo(&u, data)
	return u, err
}

// AddTo is Add, writing the update into *u: an Update returned by value
// is copied through the frames of its callers, the stack of a relay that
// inspects its stream as it passes (docs/streams.md).
func (a *AnthropicAccumulator) AddTo(u *Update, data []byte) error {
	*u = Update{}
	u.ToolCallDone, u.ToolCallStarted = -1, -1
	s, err := objectView(data)
	if s == "" {
		return err
	}
	var typ, message, index, cb, delta, usage string
	// One iterator, started in place (objIter.start), for every object.
	var it objIter
	it.start(s, tapeAt{})
	for it.next() {
		switch it.key {
		case "type":
			typ = it.val
		case "message":
			message = it.val
		case "index":
			index = it.val
		case "content_block":
			cb = it.val
		case "delta":
			delta = it.val
		case "usage":
			usage = it.val
		}
	}
	if len(typ) < 2 {
		return nil
	}
	switch typ[1 : len(typ)-1] {
	case "message_start":
		it.start(message, tapeAt{})
		for it.next() {
			switch it.key {
			case "id":
				a.id = appendString(a.id[:0], it.val)
			case "model":
				a.model = appendString(a.model[:0], it.val)
			case "usage":
				a.addUsage(it.val)
			}
		}
	case "content_block_start":
		if b := a.startBlock(index, cb); b != nil && b.isCall() {
			u.ToolCallStarted = b.index
		}
	case "content_block_delta":
		if b := a.block(index); b != nil {
			a.addDelta(b, delta, u)
		}
	case "content_block_stop":
		if b := a.block(index); b != nil && b.open {
			b.open = false
			if string(b.typ) == "tool_use" || string(b.typ) == "server_tool_use" {
				if !b.partial {
					b.text = append(b.text[:0], b.start...)
				}
				u.ToolCallDone = a.callPos(b)
			}
		}
	case "message_delta":
		it.start(delta, tapeAt{})
		for it.next() {
			if it.key == "stop_reason" && isString(it.val) {
				a.stop = appendString(a.stop[:0], it.val)
			}
		}
		a.addUsage(usage)
	case "message_stop":
		a.done, u.Done = true, true
	case "error":
		a.errRaw = append(a.errRaw[:0], data...)
		return ErrUpstream
	default:
		return nil // ping and events added later
	}
	return nil
}

// addUsage merges a usage object: message_start reports input_tokens,
// message_delta the cumulative output_tokens.
func (a *AnthropicAccumulator) addUsage(raw string) {
	if !isObject(raw) {
		return
	}
	a.hasUsage = true
	it := newObjIter(raw)
	for it.next() {
		switch it.key {
		case "input_tokens":
			if n, ok := parseInt(it.val); ok {
				a.usage.PromptTokens = n
			}
		case "output_tokens":
			if n, ok := parseInt(it.val); ok {
				a.usage.CompletionTokens = n
			}
		}
	}
	a.usage.TotalTokens = a.usage.PromptTokens + a.usage.CompletionTokens
}

// startBlock adds the block of content_block_start, nil if it reads none.
func (a *AnthropicAccumulator) startBlock(index, cb string) *block {
	n, ok := parseInt(index)
	if !ok || !isObject(cb) || len(a.blocks) >= maxToolCalls {
		return nil
	}
	a.blocks = slices.Grow(a.blocks, 1)[:len(a.blocks)+1]
	b := &a.blocks[len(a.blocks)-1]
	// Field by field, and the iterator started in place: a literal and a
	// returned iterator would be built on the stack first.
	b.index, b.typ, b.id, b.name, b.text, b.start, b.partial, b.open = n, b.typ[:0], b.id[:0], b.name[:0], b.text[:0], b.start[:0], false, true
	var it objIter
	it.start(cb, tapeAt{})
	for it.next() {
		switch it.key {
		case "type":
			b.typ = appendString(b.typ, it.val)
		case "id":
			b.id = appendString(b.id, it.val)
		case "name":
			b.name = appendString(b.name, it.val)
		case "text", "thinking":
			b.text = appendString(b.text, it.val)
		case "input":
			b.start = append(b.start, it.val...)
		}
	}
	return b
}

func (a *AnthropicAccumulator) addDelta(b *block, delta string, u *Update) {
	var typ, text, thinking, partial string
	var it objIter
	it.start(delta, tapeAt{})
	for it.next() {
		switch it.key {
		case "type":
			typ = it.val
		case "text":
			text = it.val
		case "thinking":
			thinking = it.val
		case "partial_json":
			partial = it.val
		}
	}
	switch typ {
	case `"text_delta"`:
		n := len(b.text)
		b.text = appendString(b.text, text)
		u.Text = b.text[n:]
	case `"thinking_delta"`:
		n := len(b.text)
		b.text = appendString(b.text, thinking)
		u.Reasoning = b.text[n:]
	case `"input_json_delta"`:
		if !b.open {
			return
		}
		if !b.partial {
			b.partial = true
			b.text = b.text[:0]
		}
		b.text = appendString(b.text, partial)
	}
}

// block returns the open-or-last block with the given index.
func (a *AnthropicAccumulator) block(index string) *block {
	n, ok := parseInt(index)
	if !ok {
		return nil
	}
	for i := len(a.blocks) - 1; i >= 0; i-- {
		if a.blocks[i].index == n {
			return &a.blocks[i]
		}
	}
	return nil
}

func (b *block) isCall() bool { return string(b.typ) == "tool_use" }

func (a *AnthropicAccumulator) callPos(b *block) int {
	if !b.isCall() {
		return -1
	}
	return callPos(a.blocks, b)
}

// ToolCallBytes returns the name and input JSON so far of the tool_use
// block at position pos among the tool_use blocks, ok false if there is
// none. The slices alias a's buffers and are valid until the next Add or
// Reset.
func (a *AnthropicAccumulator) ToolCallBytes(pos int) (name, args []byte, ok bool) {
	if b := nthCall(a.blocks, pos); b != nil {
		return b.name, b.text, true
	}
	return nil, nil, false
}

// ToolCalls returns the tool_use blocks so far in order; Arguments is the
// input JSON. The result is a fresh copy.
func (a *AnthropicAccumulator) ToolCalls() []ToolCall {
	var out []ToolCall
	for i := range a.blocks {
		if b := &a.blocks[i]; b.isCall() {
			out = append(out, ToolCall{Index: b.index, ID: string(b.id), Type: "tool_use", Name: string(b.name), Arguments: string(b.text)})
		}
	}
	return out
}

// Text returns the text of every text block, joined in order.
func (a *AnthropicAccumulator) Text() string {
	var out []byte
	for i := range a.blocks {
		if string(a.blocks[i].typ) == "text" {
			out = append(out, a.blocks[i].text...)
		}
	}
	return string(out)
}

// ID returns the message id of message_start.
func (a *AnthropicAccumulator) ID() string { return string(a.id) }

// Model returns the model of message_start.
func (a *AnthropicAccumulator) Model() string { return string(a.model) }

// StopReason returns the stop_reason of message_delta, "" before it.
func (a *AnthropicAccumulator) StopReason() string { return string(a.stop) }

// Usage returns the token counts so far (input_tokens as PromptTokens,
// output_tokens as CompletionTokens) and whether any were reported.
func (a *AnthropicAccumulator) Usage() (Usage, bool) { return a.usage, a.hasUsage }

// Done reports whether message_stop was added.
func (a *AnthropicAccumulator) Done() bool { return a.done }

// ErrorRaw returns the data of the last error event as received, nil if
// none. The slice is owned by a and valid until the next Reset.
func (a *AnthropicAccumulator) ErrorRaw() []byte {
	if len(a.errRaw) == 0 {
		return nil
	}
	return a.errRaw
}

// OpenBlock returns the index of the content block still open, ok false
// when none is: a cut tail sends its content_block_stop first.
func (a *AnthropicAccumulator) OpenBlock() (index int, ok bool) {
	for i := len(a.blocks) - 1; i >= 0; i-- {
		if a.blocks[i].open {
			return a.blocks[i].index, true
		}
	}
	return 0, false
}

// NextBlockIndex returns the index a new content block would take.
func (a *AnthropicAccumulator) NextBlockIndex() int {
	n := 0
	for i := range a.blocks {
		n = max(n, a.blocks[i].index+1)
	}
	return n
}
