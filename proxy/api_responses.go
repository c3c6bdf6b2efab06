package proxy

import (
	"sync"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
)

// responsesAPI is OpenAI's Responses API (POST /v1/responses), which Codex
// speaks. A request may continue a history the upstream keeps; loopguard
// keeps its own record of it (responses_record.go, answer_record.go).
var responsesAPI = register(&wireAPI{
	name:      wireapi.Responses,
	apply:     (*inject.Injector).ApplyResponses,
	terminate: (*inject.Injector).TerminateResponses,
	history:   (*pipeline).prepareRecord,
	newAnswer: func() answer { return responsesStreams.Get().(*responsesStream) },
	holdEvent: (*callHolder).itemEvent,
	cutBody:   cutResponsesBody,
})

// responsesStream is a streamed Responses answer: output items (messages,
// reasoning, function calls) that open and close with events of their own,
// numbered by sequence_number.
type responsesStream struct {
	acc      sse.ResponsesAccumulator
	to       updateSink // of the add in progress
	sequence int        // the last sequence_number before the event being added
}

var responsesStreams = sync.Pool{New: func() any { return new(responsesStream) }}

func (a *responsesStream) add(data []byte, to updateSink) error {
	a.to, a.sequence = to, a.acc.Sequence()
	return a.acc.Add(data, a.update)
}

func (a *responsesStream) update(u sse.Update) {
	a.to.update(answerUpdate{
		text:        u.Text,
		reasoning:   u.Reasoning,
		callStarted: u.ToolCallStarted,
		callDone:    u.ToolCallDone,
		sequence:    a.sequence,
	})
}

// readFirst is false: a Responses call completes with an event of its own,
// which is forwarded before the duplicate it shows ends the stream.
func (a *responsesStream) readFirst([]byte) bool { return false }

func (a *responsesStream) toolCall(pos int) (name, args []byte, ok bool) {
	return a.acc.ToolCallBytes(pos)
}

func (a *responsesStream) usage() sse.Usage {
	u, _ := a.acc.Usage()
	return u
}

func (a *responsesStream) textPath() string { return "delta" }

// dropText takes text the client never got off the open message: the cut
// tail reports the text as the client got it.
func (a *responsesStream) dropText(n int) { a.acc.DropText(n) }

// appendEnd appends the events that end a cut stream well-formed. A
// duplicate call is let through to its item's end first (appendDeferredEnd),
// so the stream goes on.
func (a *responsesStream) appendEnd(b []byte, e ending) ([]byte, bool) {
	if e.cut.Category == inspect.ToolRepetition {
		return b, false
	}
	return a.appendCut(b, e, "", heldCall{}), true
}

// appendDeferredEnd: the duplicate call's arguments are complete; its item
// closes with output_item.done, which the agent gets before the end, so
// that the stream shows whole calls only, as the Anthropic ending does.
func (a *responsesStream) appendDeferredEnd(ev *sse.Event, out []byte, e ending) []byte {
	if eventType(ev) == "response.output_item.done" {
		out = append(out, ev.Raw...)
		_ = a.acc.Add(ev.Data, nil)
	}
	return a.appendCut(out, e, "", heldCall{})
}

// eventType is a Responses event's type: its event: field, or the type
// member of its data when a server leaves the field out.
func eventType(ev *sse.Event) string {
	if len(ev.Name) > 0 {
		return string(ev.Name)
	}
	return gjson.GetBytes(ev.Data, "type").String()
}

func (a *responsesStream) appendReplacement(b []byte, e ending, text string, at heldCall) []byte {
	return a.appendCut(b, e, text, at)
}

// appendCut appends the events that end the stream, with replacement,
// when not empty, as a message item in place of the held call that began at at.
func (a *responsesStream) appendCut(b []byte, e ending, replacement string, at heldCall) []byte {
	c := inject.ResponsesCut{
		Category:  string(e.cut.Category),
		ID:        a.acc.ID(),
		Model:     a.acc.Model(),
		CreatedAt: a.acc.CreatedAt(),
		Sequence:  a.acc.Sequence(),
	}
	if replacement == "" {
		c.Output = a.acc.AppendOutput(nil)
	} else {
		// The held events were never sent: number on from the last sent.
		c.Sequence, c.Output = at.sequence, a.acc.AppendOutputBefore(nil, at.index)
		c.Answer = &inject.OpenMessage{Index: at.index, ID: "msg_loopguard_" + a.acc.ID(), Text: replacement}
	}
	if idx, id, text, ok := a.acc.OpenMessage(); ok {
		c.Open = &inject.OpenMessage{Index: idx, ID: string(id), Text: string(text)}
	}
	return inject.AppendResponsesCut(b, c)
}

func (a *responsesStream) responseID() string { return a.acc.ID() }

func (a *responsesStream) appendOutput(dst []byte) []byte { return a.acc.AppendOutput(dst) }

func (a *responsesStream) release() {
	a.acc.Reset()
	a.to, a.sequence = nil, 0
	responsesStreams.Put(a)
}

// cutResponsesBody cuts a degenerate non-streamed Responses answer: the
// output_text parts of its message items, in order, are its text; the
// message the cut falls in is marked "incomplete".
func cutResponsesBody(w *cutWatch, b []byte, _ string) []byte {
	return cutItemsBody(w, b, "output", func(i int, it gjson.Result, feed textFeed) bool {
		if it.Get("type").String() != "message" {
			return true
		}
		more := true
		it.Get("content").ForEach(func(j, p gjson.Result) bool {
			more = p.Get("type").String() != "output_text" || feed(i, int(j.Int()), p.Get("text"))
			return more
		})
		return more
	}, func(at string) jsonEdit { return jsonEdit{at + ".status", "incomplete"} })
}

var (
	_ answer         = (*responsesStream)(nil)
	_ deferredEnd    = (*responsesStream)(nil)
	_ recordedAnswer = (*responsesStream)(nil)
)
