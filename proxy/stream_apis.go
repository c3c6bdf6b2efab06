package proxy

import (
	"strconv"
	"time"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// apiEvent inspects one event of a Responses or Anthropic Messages stream
// after forwarding it: output and reasoning text feed the degeneration
// detectors, each completed function call is compared with the earlier
// calls of the answer, and a cut ends the stream in that API's own shape.
func (o *chatObserver) apiEvent(ev *sse.Event, out []byte) ([]byte, bool) {
	if o.pl.record != nil && o.cut == nil && string(ev.Name) == "response.completed" {
		// Record the answer before the agent sees its end: the agent's next
		// request may name this response at once.
		out = o.end(out)
		if o.racc.Add(ev.Data, o.update) == nil {
			o.p.saveRecord(o.pl, o.racc.ID(), gjson.ParseBytes(o.racc.AppendOutput(nil)))
			o.recorded = true
		}
		return append(out, ev.Raw...), false
	}
	if o.cutPending {
		// The duplicate call's arguments are complete; its item closes with
		// output_item.done, which the agent gets before the end, so that
		// the stream shows whole calls only, as the Anthropic ending does.
		if eventType(ev) == "response.output_item.done" {
			out = append(out, ev.Raw...)
			_ = o.racc.Add(ev.Data, o.update)
		}
		return o.appendAPICut(out), true
	}
	if len(o.terminal) > 0 && o.cut == nil {
		return o.holdAPIEvent(ev, out)
	}
	if o.trim && o.cut == nil {
		return o.trimEvent(ev, out)
	}
	out = append(out, ev.Raw...)
	if o.cut != nil || len(ev.Data) == 0 || ev.Data[0] != '{' || !o.cuts() && o.pl.record == nil {
		return out, false
	}
	if err := o.accumulate(ev.Data); err != nil || o.cut == nil || !o.cuts() {
		return out, false
	}
	return o.appendEnd(out)
}

// eventType is a Responses event's type: its event: field, or the type
// member of its data when a server leaves the field out.
func eventType(ev *sse.Event) string {
	if len(ev.Name) > 0 {
		return string(ev.Name)
	}
	return gjson.GetBytes(ev.Data, "type").String()
}

// update inspects what one event of a Responses or Anthropic stream added.
func (o *chatObserver) update(u sse.Update) {
	if o.cut != nil {
		return
	}
	o.chunkStarted, o.callDone = u.ToolCallStarted, u.ToolCallDone
	o.bytes += int64(len(u.Text) + len(u.Reasoning))
	o.text0 += int64(len(u.Text))
	o.reason0 += int64(len(u.Reasoning))
	o.arrive()
	if len(u.Text) > 0 && o.watch(&o.content[0], u.Text) {
		o.cutSlot = 1
		return
	}
	if len(u.Reasoning) > 0 && o.watch(&o.reason[0], u.Reasoning) {
		o.cutSlot = 2
		return
	}
	if u.ToolCallDone < 0 {
		return
	}
	if name, args := o.apiToolCall(u.ToolCallDone); name != nil {
		o.noteCall(name, args)
	}
}

// apiToolCall returns the name and arguments of the pos-th call of a
// Responses or Anthropic answer, nil if there is none.
func (o *chatObserver) apiToolCall(pos int) (name, args []byte) {
	var ok bool
	if o.pl.api == responsesAPI {
		name, args, ok = o.racc.ToolCallBytes(pos)
	} else {
		name, args, ok = o.aacc.ToolCallBytes(pos)
	}
	if !ok {
		return nil, nil
	}
	return name, args
}

// appendAPICut appends the events that end a cut Responses or Anthropic
// stream well-formed.
func (o *chatObserver) appendAPICut(b []byte) []byte { return o.appendAPIEnd(b, "") }

// appendAPIEnd is appendAPICut with answer, when not empty, in place of the
// held call that began at output item or content block o.holdIndex.
func (o *chatObserver) appendAPIEnd(b []byte, answer string) []byte {
	category := string(o.cut.Category)
	if o.pl.api == responsesAPI {
		c := inject.ResponsesCut{
			Category:  category,
			ID:        o.racc.ID(),
			Model:     o.racc.Model(),
			CreatedAt: o.racc.CreatedAt(),
			Sequence:  o.racc.Sequence(),
		}
		if answer == "" {
			c.Output = o.racc.AppendOutput(nil)
		} else {
			// The held events were never sent: number on from the last sent.
			c.Sequence, c.Output = o.holdSeq, o.racc.AppendOutputBefore(nil, o.holdIndex)
			c.Answer = &inject.OpenMessage{Index: o.holdIndex, ID: "msg_loopguard_" + o.racc.ID(), Text: answer}
		}
		if idx, id, text, ok := o.racc.OpenMessage(); ok {
			c.Open = &inject.OpenMessage{Index: idx, ID: string(id), Text: string(text)}
		}
		return inject.AppendResponsesCut(b, c)
	}
	c := inject.AnthropicCut{Category: category, OutputTokens: estimateTokens(o.bytes), Answer: answer, AnswerIndex: o.holdIndex}
	c.OpenBlock, c.HasOpen = o.aacc.OpenBlock()
	if o.cut.Category == inspect.ToolRepetition && answer == "" {
		// The calls forwarded so far, the first duplicate included, are
		// complete: let the agent run them.
		c.StopReason = "tool_use"
	}
	return inject.AppendAnthropicCut(b, c)
}

// apiBody inspects a non-streamed Responses or Anthropic answer. Its output
// text, in order, feeds one detector as the streamed text does; a degenerate
// text is cut where the repetition began and what followed it is dropped,
// as a streamed cut ends the answer there: a Responses message is marked
// "incomplete", an Anthropic answer ends with stop_reason "end_turn".
func (o *chatObserver) apiBody(b []byte) []byte {
	if o.content[0] == nil {
		o.content[0] = inspect.NewDegeneration(o.p.cfg.Detect.Stream)
	}
	d := o.content[0]
	var fed int64
	item, part := -1, -1 // where the cut falls: output item, content part
	var text string
	var off int64
	feed := func(i, j int, t gjson.Result) bool {
		s := t.String()
		o.bytes += int64(len(s))
		if !d.Write([]byte(s)) {
			fed += int64(len(s))
			return true
		}
		item, part, text = i, j, s
		off = min(max(d.Offset()-fed, 0), int64(len(s)))
		return false
	}
	items := "content"
	if o.pl.api == responsesAPI {
		items = "output"
	}
	gjson.GetBytes(b, items).ForEach(func(i, it gjson.Result) bool {
		if o.pl.api != responsesAPI {
			return it.Get("type").String() != "text" || feed(int(i.Int()), -1, it.Get("text"))
		}
		if it.Get("type").String() != "message" {
			return true
		}
		more := true
		it.Get("content").ForEach(func(j, p gjson.Result) bool {
			more = p.Get("type").String() != "output_text" || feed(int(i.Int()), int(j.Int()), p.Get("text"))
			return more
		})
		return more
	})
	if item < 0 {
		return nil
	}
	det := d.Detection()
	o.cut, o.cutOffset, o.cutAt = &det, off, time.Now()
	at := items + "." + strconv.Itoa(item)
	var edits []jsonEdit
	// Later entries go first so that deleting them keeps the indexes valid.
	for k := len(gjson.GetBytes(b, items).Array()) - 1; k > item; k-- {
		edits = append(edits, jsonEdit{items + "." + strconv.Itoa(k), nil})
	}
	textAt := at + ".text"
	if part >= 0 {
		for k := len(gjson.GetBytes(b, at+".content").Array()) - 1; k > part; k-- {
			edits = append(edits, jsonEdit{at + ".content." + strconv.Itoa(k), nil})
		}
		textAt = at + ".content." + strconv.Itoa(part) + ".text"
		edits = append(edits, jsonEdit{at + ".status", "incomplete"})
	} else {
		edits = append(edits, jsonEdit{"stop_reason", "end_turn"})
	}
	edits = append(edits, jsonEdit{textAt, text[:off]})
	out := b
	for _, e := range edits {
		var err error
		if e.value == nil {
			out, err = sjson.DeleteBytes(out, e.path)
		} else {
			out, err = sjson.SetBytes(out, e.path, e.value)
		}
		if err != nil {
			return nil // fail open: the answer passes unchanged
		}
	}
	return out
}

// jsonEdit is one change to a JSON body: set path to value, or delete it
// when value is nil.
type jsonEdit struct {
	path  string
	value any
}
