package sse

import (
	"bytes"
	"cmp"
	"errors"
	"github.com/loopguard/loopguard/internal/rawjson"
	"slices"
	"unsafe"

	"github.com/tidwall/gjson"
)

// ErrUpstream reports an error event inside a stream: a payload with a
// top-level "error" member (OpenAI, vLLM, llama.cpp, Anthropic) or with
// "type":"error" (OpenAI Responses). The payload is kept; see ErrorRaw.
var ErrUpstream = errors.New("sse: upstream error event")

// ErrInvalidChunk reports a data payload that is not a JSON object.
var ErrInvalidChunk = errors.New("sse: chunk is not a JSON object")

// Limits on what an upstream can make the accumulator track; entries beyond
// them are ignored. Real streams stay far below (n is rarely above 8, a turn
// rarely makes more than a few dozen parallel calls).
const (
	maxChoices   = 128
	maxToolCalls = 1024
)

// Choice is one accumulated choice of a streamed chat completion.
type Choice struct {
	Index        int        `json:"index"`
	Role         string     `json:"role,omitempty"`
	Content      string     `json:"content"`
	Reasoning    string     `json:"reasoning,omitempty"`
	FinishReason string     `json:"finish_reason,omitempty"`
	ToolCalls    []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is one accumulated tool call. Arguments is the concatenated
// argument text; it is JSON only once the call is complete.
type ToolCall struct {
	Index     int    `json:"index"`
	ID        string `json:"id"`
	Type      string `json:"type"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage is the token accounting of a stream (sent with
// stream_options.include_usage).
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type callState struct {
	index               int
	id, typ, name, args []byte
}

type choiceState struct {
	index                            int
	role, content, reasoning, finish []byte
	calls                            []callState
}

// ChatAccumulator rebuilds the final message(s) of a streamed chat
// completion from its chat.completion.chunk payloads, in every dialect the
// proxy fronts: OpenAI, vLLM, llama.cpp and Ollama.
//
// The zero value is ready to use. After the first chunks have sized its
// buffers, adding a chunk does not allocate, so one accumulator can serve a
// whole stream and then be Reset and pooled. It must not be copied after
// its first Add (its updates may live inside it), and it is not safe for
// concurrent use.
type ChatAccumulator struct {
	id, model, fingerprint []byte
	created                int64
	usage                  Usage
	hasUsage               bool
	done                   bool
	errRaw                 []byte
	choices                []choiceState
	// tmpID and tmpName hold a tool-call entry's decoded id and name while
	// the entry is matched to a call.
	tmpID, tmpName []byte
	// deltas is what the last Add returned; one0 holds it for the usual
	// chunk of one choice, so that an accumulator makes no allocation
	// for it.
	deltas []Update
	one0   [1]Update

	// DropText, when set, makes Add return each chunk's content and reasoning
	// text without keeping it: Choices then reports both
	// empty. A proxy that inspects the text delta by delta sets it, so that
	// an open stream holds one delta, not the whole answer so far
	// (docs/streams.md). Reset keeps it.
	DropText bool
}

// Reset empties a, keeping its buffers for reuse, and DropText.
func (a *ChatAccumulator) Reset() {
	*a = ChatAccumulator{id: a.id[:0], model: a.model[:0], fingerprint: a.fingerprint[:0], errRaw: a.errRaw[:0],
		choices: a.choices[:0], tmpID: a.tmpID[:0], tmpName: a.tmpName[:0], deltas: a.deltas[:0], DropText: a.DropText}
}

// Add folds one event's data into a and returns what it added, an Update
// for each choice the chunk carries, in order. Empty data is ignored and
// "[DONE]" marks the stream done. An error payload returns ErrUpstream and
// no deltas; data that is not a JSON object returns ErrInvalidChunk and
// changes nothing. Add never keeps a reference to data; the updates alias
// a's buffers and are valid until the next Add or Reset.
//
// Memory grows with the streamed text and arguments; bounding a stream's
// size is the caller's call (the Reader bounds each event).
func (a *ChatAccumulator) Add(data []byte) ([]Update, error) {
	if a.deltas == nil {
		a.deltas = a.one0[:0]
	}
	a.deltas = a.deltas[:0]
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	// Like openai-python, take any data starting with [DONE] as the end.
	if bytes.HasPrefix(data, []byte("[DONE]")) {
		a.done = true
		return nil, nil
	}
	// Validate once; the walks below then rely on well-formed JSON, and
	// read it from the tape the validation recorded.
	var tp taped
	if !rawjson.ValidTape(data, &tp.tape) {
		return nil, ErrInvalidChunk
	}
	// The walkers read strings; this view of data lives only during Add
	// and nothing derived from it is kept without a copy.
	s := unsafe.String(unsafe.SliceData(data), len(data))
	if !isObject(s) {
		return nil, ErrInvalidChunk
	}
	tp.doc = s
	top, choices, choicesAt := a.topMembers(&tp)
	if top.failed {
		a.errRaw = append(a.errRaw[:0], data...)
		return nil, ErrUpstream
	}
	if isObject(top.usage) {
		a.addUsage(top.usage)
	}
	var it2 arrIter
	it2.start(choices, choicesAt)
	for it2.nextIn(&tp) {
		if cs, calls, callsAt := a.addChoice(it2.val, it2.valAt(&tp)); calls != "" {
			a.addToolCalls(cs, calls, callsAt, &a.deltas[len(a.deltas)-1])
		}
	}
	return a.deltas, nil
}

// topMembers reads the members of the chunk tp holds, and returns where
// its choices are. Its iterator is not on the stack while the choices are
// applied.
func (a *ChatAccumulator) topMembers(tp *taped) (top chunkTop, choices string, choicesAt tapeAt) {
	var it objIter
	it.start(tp.doc, tapeAt{tp: tp})
	for it.nextIn(tp) {
		if it.key == "choices" {
			choices, choicesAt = it.val, it.valAt(tp)
		} else {
			a.topMember(&top, it.key, it.val)
		}
	}
	return top, choices, choicesAt
}

// chunkTop is what Add reads among a chunk's members, besides the
// choices, before it applies the choices.
type chunkTop struct {
	usage  string
	failed bool // an error event
}

// topMember reads one member of a chunk other than choices. The members are walked as raw
// tokens: every chunk carries id, created and model, and a gjson walk
// would decode each of them (the number as a float) only for the first
// chunk to keep them. It is a function of its own so that what it needs
// is not on the stack while the choices are applied (docs/streams.md: the
// relay's goroutine keeps 8 KiB).
func (a *ChatAccumulator) topMember(top *chunkTop, key, val string) {
	switch key {
	case "usage":
		top.usage = val
	case "error":
		// Some servers send "error":null on healthy chunks.
		top.failed = top.failed || val != "null" && val != "false" && val != `""`
	case "type":
		top.failed = top.failed || stringEqual(val, []byte("error"))
	case "id":
		if len(a.id) == 0 {
			a.id = appendString(a.id, val)
		}
	case "model":
		if len(a.model) == 0 {
			a.model = appendString(a.model, val)
		}
	case "system_fingerprint":
		if len(a.fingerprint) == 0 {
			a.fingerprint = appendString(a.fingerprint, val)
		}
	case "created":
		if a.created == 0 {
			a.created = parseCreated(val)
		}
	}
}

// parseCreated reads a chunk's created as gjson's Int does. Plain digits,
// what every server sends, are read here: gjson parses a number as a
// float, and strconv's parser holds its 800-digit decimal in its frame,
// on the stack of the first event of every stream (docs/streams.md: the
// relay's goroutine stack).
func parseCreated(val string) int64 {
	if len(val) == 0 || len(val) > 15 {
		return gjsonInt(val)
	}
	var n int64
	for i := range len(val) {
		if val[i] < '0' || val[i] > '9' {
			return gjsonInt(val)
		}
		n = n*10 + int64(val[i]-'0')
	}
	return n
}

//go:noinline
func gjsonInt(val string) int64 { return gjson.Parse(val).Int() }

func (a *ChatAccumulator) addUsage(raw string) {
	a.hasUsage = true
	// A stream may carry usage on every chunk (vLLM continuous_usage_stats);
	// the counts are cumulative, so the last one wins.
	a.usage = Usage{}
	gjson.Parse(raw).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "prompt_tokens":
			a.usage.PromptTokens = int(v.Int())
		case "completion_tokens":
			a.usage.CompletionTokens = int(v.Int())
		case "total_tokens":
			a.usage.TotalTokens = int(v.Int())
		}
		return true
	})
}

// addChoice folds one element of choices, raw, the value at of the tape,
// and appends what it added to the choice to a.deltas; nothing when it is
// no choice (not an object, or past maxChoices). It returns the choice and
// its delta's tool_calls, calls, the value callsAt of the tape (calls
// empty when none), which Add folds (addToolCalls) once addChoice's frame
// is off the stack. The update
// is written where it is kept rather than returned: an Update returned by
// value is copied through the frames the tool calls are read under
// (docs/streams.md: the relay's goroutine stack).
func (a *ChatAccumulator) addChoice(raw string, at tapeAt) (cs *choiceState, calls string, callsAt tapeAt) {
	if !isObject(raw) {
		return nil, "", tapeAt{}
	}
	var index int
	var delta, message, finish string
	var deltaAt, messageAt tapeAt
	// llama.cpp writes finish_reason and index before delta: read the
	// members first, then apply them.
	var it objIter
	it.start(raw, at)
	for it.nextIn(at.tp) {
		switch it.key {
		case "index":
			index, _ = parseInt(it.val)
		case "delta":
			delta, deltaAt = it.val, it.valAt(at.tp)
		case "message":
			message, messageAt = it.val, it.valAt(at.tp)
		case "finish_reason":
			finish = it.val
		}
	}
	if delta == "" {
		delta, deltaAt = message, messageAt // a whole message where a delta was expected
	}
	cs = a.choice(index)
	if cs == nil {
		return nil, "", tapeAt{}
	}
	a.deltas = append(a.deltas, Update{})
	d := &a.deltas[len(a.deltas)-1]
	d.Choice, d.ToolCallStarted, d.ToolCallDone = index, -1, -1
	reasoning := false
	it.start(delta, deltaAt)
	for it.nextIn(at.tp) {
		switch it.key {
		case "content":
			if isString(it.val) {
				cs.content = a.keep(cs.content)
				n := len(cs.content)
				cs.content = appendString(cs.content, it.val)
				d.Text = cs.content[n:]
			}
		case "reasoning_content", "reasoning":
			// vLLM has sent both names with the same text: take one.
			if isString(it.val) && !reasoning {
				reasoning = true
				cs.reasoning = a.keep(cs.reasoning)
				n := len(cs.reasoning)
				cs.reasoning = appendString(cs.reasoning, it.val)
				d.Reasoning = cs.reasoning[n:]
			}
		case "role":
			if len(cs.role) == 0 {
				cs.role = appendString(cs.role, it.val)
			}
		case "tool_calls":
			if calls != "" {
				a.addToolCalls(cs, calls, callsAt, d) // a repeated member: the one before first
			}
			calls, callsAt = it.val, it.valAt(at.tp)
		}
	}
	if isString(finish) && len(finish) > 2 {
		cs.finish = appendString(cs.finish[:0], finish)
		d.FinishReason = cs.finish
	}
	return cs, calls, callsAt
}

// addToolCalls folds the elements of a delta's tool_calls, raw, the value
// at of the tape, into cs and d.
func (a *ChatAccumulator) addToolCalls(cs *choiceState, raw string, at tapeAt, d *Update) {
	var it arrIter
	it.start(raw, at)
	for it.nextIn(at.tp) {
		a.addToolCall(cs, it.val, it.valAt(at.tp), d)
	}
}

// keep returns the text kept so far in b, to append a delta to: all of it,
// or none with DropText.
func (a *ChatAccumulator) keep(b []byte) []byte {
	if a.DropText {
		return b[:0]
	}
	return b
}

// choice returns the state of the choice with the given index, adding it if
// new, or nil past maxChoices.
func (a *ChatAccumulator) choice(index int) *choiceState {
	for i := range a.choices {
		if a.choices[i].index == index {
			return &a.choices[i]
		}
	}
	if len(a.choices) >= maxChoices {
		return nil
	}
	a.choices = slices.Grow(a.choices, 1)[:len(a.choices)+1]
	cs := &a.choices[len(a.choices)-1]
	// Reuse the buffers of a pooled accumulator.
	*cs = choiceState{
		index: index, role: cs.role[:0], content: cs.content[:0],
		reasoning: cs.reasoning[:0], finish: cs.finish[:0], calls: cs.calls[:0],
	}
	return cs
}

// addToolCall folds one element of delta.tool_calls, raw, the value at of
// the tape.
func (a *ChatAccumulator) addToolCall(cs *choiceState, raw string, at tapeAt, d *Update) {
	if !isObject(raw) {
		return
	}
	var index int
	hasIndex := false
	var id, typ, fnRaw, name, args string
	var fnAt tapeAt
	var it objIter
	it.start(raw, at)
	for it.nextIn(at.tp) {
		switch it.key {
		case "index":
			index, hasIndex = parseInt(it.val)
		case "id":
			id = it.val
		case "type":
			typ = it.val
		case "function":
			fnRaw, fnAt = it.val, it.valAt(at.tp)
		}
	}
	it.start(fnRaw, fnAt)
	for it.nextIn(at.tp) {
		switch it.key {
		case "name":
			name = it.val
		case "arguments":
			args = it.val
		}
	}
	a.tmpID = appendString(a.tmpID[:0], id)
	a.tmpName = appendString(a.tmpName[:0], name)
	d.ToolCall = true

	// Find the call this entry continues: the last one with its index, or
	// with no index at all (some servers omit it) the last call.
	pos := -1
	if hasIndex {
		for i := len(cs.calls) - 1; i >= 0; i-- {
			if cs.calls[i].index == index {
				pos = i
				break
			}
		}
	} else if len(cs.calls) > 0 {
		pos = len(cs.calls) - 1
		index = cs.calls[pos].index
	}
	// Servers repeat id and name freely (vLLM's finish chunk, PR #31438),
	// but an entry with a different id and a name of its own is a new call
	// even if it reuses an index (providers that number every call 0).
	if pos >= 0 && len(a.tmpID) > 0 && len(a.tmpName) > 0 {
		if c := &cs.calls[pos]; len(c.id) > 0 && !bytes.Equal(c.id, a.tmpID) {
			pos = -1
			if !hasIndex {
				index = len(cs.calls)
			}
		}
	}
	if pos < 0 {
		if len(cs.calls) >= maxToolCalls {
			return
		}
		pos = len(cs.calls)
		cs.calls = slices.Grow(cs.calls, 1)[:pos+1]
		c := &cs.calls[pos]
		// Field by field: a literal would be built on the stack first.
		c.index, c.id, c.typ, c.name, c.args = index, c.id[:0], c.typ[:0], c.name[:0], c.args[:0]
		if d.ToolCallStarted < 0 {
			d.ToolCallStarted = pos
		}
		d.ToolCallsStarted++
	}
	c := &cs.calls[pos]
	if len(c.id) == 0 {
		c.id = append(c.id, a.tmpID...)
	}
	if len(c.typ) == 0 {
		c.typ = appendString(c.typ, typ)
	}
	if len(c.name) == 0 {
		c.name = append(c.name, a.tmpName...)
	}
	switch {
	case isString(args):
		c.args = appendString(c.args, args)
	case len(args) > 0 && (args[0] == '{' || args[0] == '['):
		// Ollama's native API and some adapters send arguments as an
		// object instead of JSON text.
		c.args = append(c.args, args...)
	}
}

// ID returns the completion id from the first chunk that had one.
func (a *ChatAccumulator) ID() string { return string(a.id) }

// Model returns the model from the first chunk that named one.
func (a *ChatAccumulator) Model() string { return string(a.model) }

// Created returns the creation time (Unix seconds) from the first chunk that
// had one, 0 if none did.
func (a *ChatAccumulator) Created() int64 { return a.created }

// SystemFingerprint returns the system_fingerprint of the first chunk that
// had one.
func (a *ChatAccumulator) SystemFingerprint() string { return string(a.fingerprint) }

// Usage returns the last usage reported, and whether any was.
func (a *ChatAccumulator) Usage() (Usage, bool) { return a.usage, a.hasUsage }

// Done reports whether the stream's "[DONE]" sentinel was added.
func (a *ChatAccumulator) Done() bool { return a.done }

// ErrorRaw returns the data of the last error event as received, nil if
// there was none. The slice is owned by a and valid until the next Reset.
func (a *ChatAccumulator) ErrorRaw() []byte {
	if len(a.errRaw) == 0 {
		return nil
	}
	return a.errRaw
}

// ToolCallBytes returns the name and arguments so far of the tool call at
// position pos of the choice with the given index, ok false if there is
// none. Unlike Choices it copies nothing, so a streaming check can look at
// each call as it completes (see Update.ToolCallStarted) at no cost. The
// slices alias a's buffers and are valid until the next Add or Reset.
func (a *ChatAccumulator) ToolCallBytes(choice, pos int) (name, args []byte, ok bool) {
	for i := range a.choices {
		if cs := &a.choices[i]; cs.index == choice {
			if pos < 0 || pos >= len(cs.calls) {
				return nil, nil, false
			}
			c := &cs.calls[pos]
			return c.name, c.args, true
		}
	}
	return nil, nil, false
}

// Choices returns the accumulated choices sorted by index, their tool calls
// in the order they began. The result is a fresh copy owned by the caller.
func (a *ChatAccumulator) Choices() []Choice {
	if len(a.choices) == 0 {
		return nil
	}
	out := make([]Choice, len(a.choices))
	for i := range a.choices {
		cs := &a.choices[i]
		c := Choice{Index: cs.index, Role: string(cs.role), FinishReason: string(cs.finish)}
		if !a.DropText {
			c.Content, c.Reasoning = string(cs.content), string(cs.reasoning)
		}
		if len(cs.calls) > 0 {
			c.ToolCalls = make([]ToolCall, len(cs.calls))
			for j := range cs.calls {
				tc := &cs.calls[j]
				c.ToolCalls[j] = ToolCall{
					Index: tc.index, ID: string(tc.id), Type: string(tc.typ),
					Name: string(tc.name), Arguments: string(tc.args),
				}
			}
		}
		out[i] = c
	}
	slices.SortStableFunc(out, func(x, y Choice) int { return cmp.Compare(x.Index, y.Index) })
	return out
}
