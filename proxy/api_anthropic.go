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
})

// anthropicStream is a streamed Anthropic message: content blocks (text,
// thinking, tool_use) that open and close with events of their own.
type anthropicStream struct {
	acc sse.AnthropicAccumulator
	to  updateSink // of the add in progress
}

var anthropicStreams = sync.Pool{New: func() any { return new(anthropicStream) }}

func (a *anthropicStream) add(data []byte, to updateSink) error {
	a.to = to
	return a.acc.Add(data, a.update)
}

func (a *anthropicStream) update(u sse.Update) {
	a.to.update(answerUpdate{
		text:        u.Text,
		reasoning:   u.Reasoning,
		callStarted: u.ToolCallStarted,
		callDone:    u.ToolCallDone,
	})
}

// readFirst is false: a tool_use block completes with an event of its own,
// which is forwarded before the duplicate it shows ends the stream.
func (a *anthropicStream) readFirst([]byte) bool { return false }

func (a *anthropicStream) toolCall(pos int) (name, args []byte, ok bool) {
	return a.acc.ToolCallBytes(pos)
}

func (a *anthropicStream) usage() sse.Usage {
	u, _ := a.acc.Usage()
	return u
}

func (a *anthropicStream) textPath() string { return "delta.text" }

// dropText does nothing: a cut Anthropic stream's end does not repeat the
// text.
func (a *anthropicStream) dropText(int) {}

// appendEnd appends the events that end a cut stream well-formed.
func (a *anthropicStream) appendEnd(b []byte, e ending) ([]byte, bool) {
	return a.appendCut(b, e, "", heldCall{}), true
}

func (a *anthropicStream) appendReplacement(b []byte, e ending, text string, at heldCall) []byte {
	return a.appendCut(b, e, text, at)
}

// appendCut appends the end of the stream, with replacement, when not
// empty, as a text block in place of the held tool_use block that began at at.
func (a *anthropicStream) appendCut(b []byte, e ending, replacement string, at heldCall) []byte {
	c := inject.AnthropicCut{Category: string(e.cut.Category), OutputTokens: estimateTokens(e.bytes),
		Answer: replacement, AnswerIndex: at.index}
	c.OpenBlock, c.HasOpen = a.acc.OpenBlock()
	if e.cut.Category == inspect.ToolRepetition && replacement == "" {
		// The calls forwarded so far, the first duplicate included, are
		// complete: let the agent run them.
		c.StopReason = "tool_use"
	}
	return inject.AppendAnthropicCut(b, c)
}

func (a *anthropicStream) release() {
	a.acc.Reset()
	a.to = nil
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
