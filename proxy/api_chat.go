package proxy

import (
	"bytes"
	"strconv"
	"sync"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/sjson"
)

// chatAPI is OpenAI's chat completions (POST /v1/chat/completions), which
// most servers speak: every request carries the whole history.
var chatAPI = register(&wireAPI{
	name:      wireapi.Chat,
	apply:     (*inject.Injector).Apply,
	terminate: (*inject.Injector).Terminate,
	newAnswer: func() answer { return chatStreams.Get().(*chatStream) },
	holdEvent: (*callHolder).chunkEvent,
	cutBody:   cutChatBody,
	textPath:  "choices.0.delta.content",
	readFirst: opensCalls,
})

// chatStream is a streamed chat completion: chunks of choices whose tool
// calls end only when the next begins or the choice finishes.
type chatStream struct{ acc sse.ChatAccumulator }

var chatStreams = sync.Pool{New: func() any {
	a := new(chatStream)
	// The detectors see each delta; nothing reads the answer's text
	// afterwards, so an open stream does not hold it (docs/streams.md).
	a.acc.DropText = true
	return a
}}

func (a *chatStream) add(data []byte) ([]sse.Update, error) { return a.acc.Add(data) }

// toolCallsKey marks chunks that carry tool calls or finish them.
var toolCallsKey = []byte(`"tool_calls"`)

// opensCalls is chat's readFirst: a chunk that may open a tool call or
// finish the calls is read before it is forwarded: when it shows that the
// call before it was a duplicate, the cut replaces it, so the agent never
// sees the start of a further call (an empty, unrunnable one).
func opensCalls(data []byte) bool { return bytes.Contains(data, toolCallsKey) }

func (a *chatStream) toolCall(pos int) (name, args []byte, ok bool) {
	return a.acc.ToolCallBytes(0, pos)
}

func (a *chatStream) usage() sse.Usage {
	u, _ := a.acc.Usage()
	return u
}

// appendEnd appends the end of the client's stream after a cut,
// well-formed: a comment naming the rule, a final chunk per choice carrying
// the stream's id, model and created, a usage chunk if the request asked
// for one, and [DONE]; or e's replacement (appendReplacement).
func (a *chatStream) appendEnd(b []byte, e *ending, _ *sse.Event) ([]byte, bool) {
	if e.replacement != "" {
		return a.appendReplacement(b, e), true
	}
	b = append(b, ": loopguard cut category="...)
	b = append(b, e.cut.Category...)
	b = append(b, " offset="...)
	b = strconv.AppendInt(b, e.offset, 10)
	b = append(b, "\n\n"...)

	finish := e.finishReason
	if e.cut.Category == inspect.ToolRepetition {
		finish = "tool_calls"
	}
	n := len(a.acc.Choices())
	if n == 0 {
		n = 1
	}
	for i := 0; i < n; i++ {
		b = append(b, "data: "...)
		b = a.appendChunkHead(b, e.model)
		b = append(b, `"choices":[{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"delta":{},"finish_reason":`...)
		b = rawjson.AppendQuote(b, finish)
		b = append(b, "}]}\n\n"...)
	}
	if e.usage {
		prompt := 0
		if u, ok := a.acc.Usage(); ok {
			prompt = u.PromptTokens
		}
		completion := estimateTokens(e.bytes)
		b = append(b, "data: "...)
		b = a.appendChunkHead(b, e.model)
		b = append(b, `"choices":[],"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(prompt), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(completion), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(prompt+completion), 10)
		// completion_tokens is counted by loopguard, not by the model.
		b = append(b, `,"estimated":true}}`+"\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...), true
}

// appendReplacement ends the stream with e's replacement, the
// LOOP_DETECTED text, as choice 0's content, in the stream's own id and
// model.
func (a *chatStream) appendReplacement(b []byte, e *ending) []byte {
	b = append(b, "data: "...)
	b = a.appendChunkHead(b, e.model)
	b = append(b, `"choices":[{"index":0,"delta":{"role":"assistant","content":`...)
	b = rawjson.AppendQuote(b, e.replacement)
	b = append(b, `},"finish_reason":null}]}`+"\n\n"...)
	b = append(b, "data: "...)
	b = a.appendChunkHead(b, e.model)
	b = append(b, `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"...)
	return append(b, "data: [DONE]\n\n"...)
}

// appendChunkHead writes the id, object, created and model members of a
// chunk of this stream, opening the object; model stands in for a stream
// that named none.
func (a *chatStream) appendChunkHead(b []byte, model string) []byte {
	b = append(b, `{"id":`...)
	b = rawjson.AppendQuote(b, a.acc.ID())
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, a.acc.Created(), 10)
	b = append(b, `,"model":`...)
	if m := a.acc.Model(); m != "" {
		model = m
	}
	b = rawjson.AppendQuote(b, model)
	return append(b, ',')
}

func (a *chatStream) release() {
	a.acc.Reset()
	chatStreams.Put(a)
}

// cutChatBody cuts a degenerate non-streamed chat answer: each choice's
// text is cut at the offset where its repetition began, with finish_reason
// set as for streams. b has passed rawjson.Valid. The text is read in
// place, or decoded into a pooled buffer when it has escapes: gjson's
// ForEach and Get copied every choice, and the text twice more (docs/streams.md).
// As for gjson's Get, the first member of a name counts.
func cutChatBody(w *cutWatch, b []byte, finish string) []byte {
	choices, ok := firstMember(rawjson.View(b), "choices")
	if !ok || choices[0] != '[' {
		return nil
	}
	out := b
	changed := false
	j := rawjson.SkipSpace(choices, 1)
	for i := 0; i < maxWatchedChoices && j < len(choices) && choices[j] != ']'; i++ {
		end := rawjson.ValueEnd(choices, j)
		cut, ok := cutChatChoice(w, out, i, choices[j:end], finish)
		if !ok {
			break
		}
		if cut != nil {
			out, changed = cut, true
		}
		if j = rawjson.SkipSpace(choices, end); j < len(choices) && choices[j] == ',' {
			j = rawjson.SkipSpace(choices, j+1)
		}
	}
	if !changed {
		return nil
	}
	return out
}

// cutChatChoice feeds the text of choices[i], raw, to its detector and,
// when it degenerated, returns out with the choice cut; ok is false when
// the edit failed.
func cutChatChoice(w *cutWatch, out []byte, i int, raw, finish string) (cut []byte, ok bool) {
	message, ok := firstMember(raw, "message")
	if !ok || message[0] != '{' {
		return nil, true
	}
	content, ok := firstMember(message, "content")
	if !ok || content[0] != '"' {
		return nil, true
	}
	text := rawjson.Bytes(content[1 : len(content)-1])
	if bytes.IndexByte(text, '\\') >= 0 {
		buf := textBufs.Get().(*[]byte)
		*buf = rawjson.AppendUnescaped((*buf)[:0], content[1:len(content)-1])
		text = *buf
		defer putTextBuf(buf)
	}
	d := w.textDetector(i)
	w.bytes += int64(len(text))
	if !d.Write(text) {
		return nil, true
	}
	det := d.Detection()
	off := d.Offset()
	if off < 0 || off > int64(len(text)) {
		off = int64(len(text))
	}
	w.cutAt(det, off)
	idx := strconv.Itoa(i)
	var err error
	if out, err = sjson.SetBytes(out, "choices."+idx+".message.content", string(text[:off])); err != nil {
		return nil, false
	}
	if out, err = sjson.SetBytes(out, "choices."+idx+".finish_reason", finish); err != nil {
		return nil, false
	}
	return out, true
}

// textBufs holds the buffers a non-streamed answer's text with escapes is
// decoded into.
var textBufs = sync.Pool{New: func() any { return new([]byte) }}

// putTextBuf returns buf to textBufs, unless an answer of more than
// 64 KiB made it too large to keep.
func putTextBuf(buf *[]byte) {
	if cap(*buf) <= 64<<10 {
		textBufs.Put(buf)
	}
}

var _ answer = (*chatStream)(nil)
