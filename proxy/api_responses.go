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
	textPath:  "delta",
})

// responsesStream is a streamed Responses answer: output items (messages,
// reasoning, function calls) that open and close with events of their own,
// numbered by sequence_number.
type responsesStream struct {
	acc sse.ResponsesAccumulator
	up  [1]sse.Update // what the last add returned
}

var responsesStreams = sync.Pool{New: func() any { return new(responsesStream) }}

func (a *responsesStream) add(data []byte) ([]sse.Update, error) {
	if err := a.acc.AddTo(&a.up[0], data); err != nil {
		return nil, err
	}
	return a.up[:], nil
}

func (a *responsesStream) toolCall(pos int) (name, args []byte, ok bool) {
	return a.acc.ToolCallBytes(pos)
}

func (a *responsesStream) usage() sse.Usage {
	u, _ := a.acc.Usage()
	return u
}

// appendEnd appends the events that end a cut stream well-formed. A
// duplicate call is let through to its item's end first: the call's
// arguments are complete, and its item closes with output_item.done, which
// the agent gets before the end, so that the stream shows whole calls
// only, as the Anthropic ending does.
func (a *responsesStream) appendEnd(b []byte, e *ending, next *sse.Event) ([]byte, bool) {
	if e.cut.Category == inspect.ToolRepetition && e.replacement == "" {
		if next == nil {
			return b, false
		}
		if eventType(next) == "response.output_item.done" {
			b = append(b, next.Raw...)
			_, _ = a.acc.Add(next.Data)
		}
	}
	// The text held back from the client (tail = "trim") is not reported.
	a.acc.DropText(int(e.dropped))
	return a.appendCut(b, e), true
}

// eventType is a Responses event's type: its event: field, or the type
// member of its data when a server leaves the field out.
func eventType(ev *sse.Event) string {
	if len(ev.Name) > 0 {
		return string(ev.Name)
	}
	return gjson.GetBytes(ev.Data, "type").String()
}

// appendCut appends the events that end the stream, with e's replacement,
// when not empty, as a message item in place of the held call it names.
func (a *responsesStream) appendCut(b []byte, e *ending) []byte {
	c := inject.ResponsesCut{
		Category:  string(e.cut.Category),
		ID:        a.acc.ID(),
		Model:     a.acc.Model(),
		CreatedAt: a.acc.CreatedAt(),
		Sequence:  a.acc.Sequence(),
	}
	if e.replacement == "" {
		c.Output = a.acc.AppendOutput(nil)
	} else {
		// The held events were never sent: number on from the last sent.
		c.Sequence, c.Output = e.at.sequence, a.acc.AppendOutputBefore(nil, e.at.index)
		c.Answer = &inject.OpenMessage{Index: e.at.index, ID: "msg_loopguard_" + a.acc.ID(), Text: e.replacement}
	}
	if idx, id, text, ok := a.acc.OpenMessage(); ok {
		c.Open = &inject.OpenMessage{Index: idx, ID: string(id), Text: string(text)}
	}
	return inject.AppendResponsesCut(b, c)
}

func (a *responsesStream) release() {
	a.acc.Reset()
	a.up = [1]sse.Update{}
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

var _ answer = (*responsesStream)(nil)
