package proxy

import (
	"sync"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
)

// anthropicAPI is Anthropic Messages (POST /v1/messages), which Claude Code
// speaks: every request carries the whole history.
var anthropicAPI = register(&wireAPI{
	name:      wireapi.Anthropic,
	apply:     (*inject.Injector).ApplyAnthropic,
	terminate: (*inject.Injector).TerminateAnthropic,
	newAnswer: func() answer { return anthropicStreams.Get().(*anthropicStream) },
	holdEvent: (*callHolder).itemEvent,
	cutBody:   cutAnthropicBody,
	textPath:  "delta.text",
})

// anthropicStream is a streamed Anthropic message: content blocks (text,
// thinking, tool_use) that open and close with events of their own.
type anthropicStream struct {
	acc sse.AnthropicAccumulator
	up  [1]sse.Update // what the last add returned
}

var anthropicStreams = sync.Pool{New: func() any { return new(anthropicStream) }}

func (a *anthropicStream) add(data []byte) ([]sse.Update, error) {
	if err := a.acc.AddTo(&a.up[0], data); err != nil {
		return nil, err
	}
	return a.up[:], nil
}

func (a *anthropicStream) toolCall(pos int) (name, args []byte, ok bool) {
	return a.acc.ToolCallBytes(pos)
}

func (a *anthropicStream) usage() sse.Usage {
	u, _ := a.acc.Usage()
	return u
}

// appendEnd appends the events that end a cut stream well-formed; a cut
// Anthropic stream's end does not repeat the text, so what tail = "trim"
// dropped needs no word.
func (a *anthropicStream) appendEnd(b []byte, e *ending, _ *sse.Event) ([]byte, bool) {
	return a.appendCut(b, e), true
}

// appendCut appends the end of the stream, with e's replacement, when not
// empty, as a text block in place of the held tool_use block it names.
func (a *anthropicStream) appendCut(b []byte, e *ending) []byte {
	c := inject.AnthropicCut{Category: string(e.cut.Category), OutputTokens: estimateTokens(e.bytes),
		Answer: e.replacement, AnswerIndex: e.at.index}
	c.OpenBlock, c.HasOpen = a.acc.OpenBlock()
	if e.cut.Category == inspect.ToolRepetition && e.replacement == "" {
		// The calls forwarded so far, the first duplicate included, are
		// complete: let the agent run them.
		c.StopReason = "tool_use"
	}
	return inject.AppendAnthropicCut(b, c)
}

func (a *anthropicStream) release() {
	a.acc.Reset()
	a.up = [1]sse.Update{}
	anthropicStreams.Put(a)
}

// cutAnthropicBody cuts a degenerate non-streamed Anthropic answer: its
// text blocks, in order, are its text; the answer ends with stop_reason
// "end_turn".
func cutAnthropicBody(w *cutWatch, b []byte, _ string) []byte {
	return cutItemsBody(w, b, "content", func(i int, it gjson.Result, feed textFeed) bool {
		return it.Get("type").String() != "text" || feed(i, -1, it.Get("text"))
	}, func(string) jsonEdit { return jsonEdit{"stop_reason", "end_turn"} })
}

var _ answer = (*anthropicStream)(nil)
