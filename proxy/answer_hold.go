package proxy

import (
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
)

// callHolder holds tool calls back (stream.hold_tool_calls) while a call
// the ladder would end is in play: the events of a call wait until it is
// complete, and a call that matches a terminal call is replaced by the
// LOOP_DETECTED answer, so it never reaches the agent. What is still held
// when the stream ends goes out through the observer's end.
type callHolder struct {
	terminal []terminalCall
	held     []byte // raw events waiting for their tool calls to complete
	scratch  []byte
	// replaced: a held call was replaced by LOOP_DETECTED.
	replaced bool

	// What the event being held showed (see note).
	tools    bool // chat: it carried tool-call deltas
	finish   bool // chat: it finished the choice
	started  int  // a call it began, -1 if none (sse.Update.ToolCallStarted)
	done     int  // the call it completed, -1 if none (Responses, Anthropic)
	sequence int  // the last sequence_number before it (Responses)

	checked int      // chat: calls already compared with terminal
	open    int      // Responses, Anthropic: calls begun and not completed
	at      heldCall // Responses, Anthropic: where the first held call began
}

// terminalCall is a tool call whose next occurrence the ladder would end:
// its pattern's constraints are active one rung below terminate.
type terminalCall struct {
	key        uint64
	constraint policy.Constraint
}

// terminalCalls lists the calls of d's active constraints that sit one rung
// below terminate, for stream.hold_tool_calls.
func terminalCalls(ladder []policy.Action, d *policy.Decision) []terminalCall {
	var out []terminalCall
	var scratch []byte
	for _, c := range d.Constraints {
		if c.Tool == "" || c.Level+1 >= len(ladder) || ladder[c.Level+1] != policy.Terminate {
			continue
		}
		var key uint64
		key, scratch = inspect.CallKey(scratch, c.Tool, c.Args)
		out = append(out, terminalCall{key: key, constraint: c})
	}
	return out
}

// note keeps what an event added to choice 0 that holding needs.
func (h *callHolder) note(u *sse.Update) {
	h.tools = h.tools || u.ToolCall
	h.finish = h.finish || (u.FinishReason != nil)
	if u.ToolCallStarted >= 0 {
		h.started = u.ToolCallStarted
	}
	if u.ToolCallDone >= 0 {
		h.done = u.ToolCallDone
	}
	h.sequence = u.Sequence
}

// chunkEvent holds the events of an API whose calls end only when the
// next begins or the choice finishes (chat): chunks that carry tool-call
// deltas wait until every call they hold is complete; then each completed
// call is compared with the terminal calls.
func (h *callHolder) chunkEvent(o *answerObserver, ev *sse.Event, out []byte) ([]byte, bool) {
	h.tools, h.started, h.finish = false, -1, false
	if out, stop, done := h.read(o, ev, out); done {
		return out, stop
	}
	complete := h.checked
	switch {
	case h.finish:
		complete = int(^uint(0) >> 1)
	case h.started >= 0:
		complete = h.started
	}
	for ; h.checked < complete; h.checked++ {
		name, args, ok := o.answer.toolCall(h.checked)
		if !ok {
			break
		}
		if t := h.match(name, args); t != nil {
			return h.replace(o, out, t), true
		}
	}
	switch {
	case h.finish:
		out = h.release(out)
		out = append(out, ev.Raw...)
	case h.tools:
		// Calls before the one this chunk started are complete and passed:
		// release them, and hold this chunk with the new call.
		if h.started >= 0 {
			out = h.release(out)
		}
		h.held = append(h.held, ev.Raw...)
	case len(h.held) > 0:
		h.held = append(h.held, ev.Raw...)
	default:
		out = append(out, ev.Raw...)
	}
	return out, false
}

// itemEvent holds the events of an API where each call opens and closes
// with events of its own (Responses: output_item.added to
// function_call_arguments.done; Anthropic: content_block_start to
// content_block_stop of a tool_use block): the events from a call's start
// to its end wait, and the completed call is compared with the terminal
// calls.
func (h *callHolder) itemEvent(o *answerObserver, ev *sse.Event, out []byte) ([]byte, bool) {
	h.started, h.done = -1, -1
	if out, stop, done := h.read(o, ev, out); done {
		return out, stop
	}
	if h.started >= 0 {
		if h.open == 0 {
			// The answer, should it replace this call, takes its place.
			h.at = heldCall{index: h.started, sequence: h.sequence}
		}
		h.open++
	}
	if h.done >= 0 && h.open > 0 {
		name, args, _ := o.answer.toolCall(h.done)
		if t := h.match(name, args); t != nil {
			return h.replace(o, out, t), true
		}
		if h.open--; h.open == 0 {
			out = h.release(out)
			return append(out, ev.Raw...), false
		}
	}
	if h.open > 0 {
		h.held = append(h.held, ev.Raw...)
		return out, false
	}
	return append(out, ev.Raw...), false
}

// read folds ev into the answer; done reports that ev is dealt with: one
// the answer cannot read goes out after what is held, and a cut ends the
// stream after them.
func (h *callHolder) read(o *answerObserver, ev *sse.Event, out []byte) (_ []byte, stop, done bool) {
	if len(ev.Data) > 0 && ev.Data[0] == '{' {
		if err := o.read(ev.Data); err != nil {
			out = h.release(out)
			return append(out, ev.Raw...), false, true
		}
	}
	if o.watch.cut == nil {
		return out, false, false
	}
	out = h.release(out)
	out, stop = o.appendEnd(append(out, ev.Raw...))
	return out, stop, true
}

// match returns the terminal call a completed call matches, nil if none.
func (h *callHolder) match(name, args []byte) *terminalCall {
	var key uint64
	key, h.scratch = inspect.CallKey(h.scratch, string(name), string(args))
	for i := range h.terminal {
		if h.terminal[i].key == key {
			return &h.terminal[i]
		}
	}
	return nil
}

// release appends the held events and lets go of them.
func (h *callHolder) release(out []byte) []byte {
	out = append(out, h.held...)
	h.held = h.held[:0]
	return out
}

// replace drops the held tool-call events and appends the LOOP_DETECTED
// answer in the stream's own id and model and its API's shape, where the
// call began, which ends the stream.
func (h *callHolder) replace(o *answerObserver, b []byte, t *terminalCall) []byte {
	h.held = h.held[:0]
	text, err := o.pipeline.inject.TerminateText(activeConstraint(t.constraint))
	if err != nil {
		text = "LOOP_DETECTED: " + t.constraint.Brief
	}
	o.watch.cut = &inspect.Detection{Category: t.constraint.Category, Score: 1,
		Evidence: inspect.Evidence{Tool: t.constraint.Tool, Args: t.constraint.Args}}
	h.replaced = true
	o.pipeline.log.Info().Str("session", o.plan.key).Str("category", string(t.constraint.Category)).
		Str("pattern_key", t.constraint.Pattern).Str("tool", t.constraint.Tool).
		Msg("held tool call replaced by LOOP_DETECTED")
	e := o.ending()
	e.replacement, e.at = text, h.at
	b, _ = o.answer.appendEnd(b, e, nil)
	return b
}

// reset readies h for another answer, keeping its buffers.
func (h *callHolder) reset() {
	*h = callHolder{held: h.held[:0], scratch: h.scratch[:0]}
}
