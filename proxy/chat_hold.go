package proxy

import (
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
)

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

// holdEvent handles one event while tool calls are held (hold_tool_calls
// with a terminal call in play): events that carry tool-call deltas wait in
// o.held until every call they hold is complete; then each completed call is
// compared with the terminal calls. A match replaces the held events with
// the LOOP_DETECTED answer, so the call never reaches the agent. What is
// still held when the stream ends goes out through end.
func (o *chatObserver) holdEvent(ev *sse.Event, out []byte) ([]byte, bool) {
	o.chunkTools, o.chunkStarted, o.chunkFinish = false, -1, false
	if len(ev.Data) > 0 && ev.Data[0] == '{' {
		if err := o.acc.Add(ev.Data, o.delta); err != nil {
			out = o.releaseHeld(out)
			return append(out, ev.Raw...), false
		}
	}
	if o.cut != nil {
		out = o.releaseHeld(out)
		out = append(out, ev.Raw...)
		return o.appendCut(out), true
	}
	complete := o.holdChecked
	switch {
	case o.chunkFinish:
		complete = int(^uint(0) >> 1)
	case o.chunkStarted >= 0:
		complete = o.chunkStarted
	}
	for ; o.holdChecked < complete; o.holdChecked++ {
		name, args, ok := o.acc.ToolCallBytes(0, o.holdChecked)
		if !ok {
			break
		}
		if t := o.terminalCall(name, args); t != nil {
			return o.replaceHeld(out, t), true
		}
	}
	switch {
	case o.chunkFinish:
		out = o.releaseHeld(out)
		out = append(out, ev.Raw...)
	case o.chunkTools:
		// Calls before the one this chunk started are complete and passed:
		// release them, and hold this chunk with the new call.
		if o.chunkStarted >= 0 {
			out = o.releaseHeld(out)
		}
		o.held = append(o.held, ev.Raw...)
	case len(o.held) > 0:
		o.held = append(o.held, ev.Raw...)
	default:
		out = append(out, ev.Raw...)
	}
	return out, false
}

// holdAPIEvent is holdEvent for Responses and Anthropic streams, where
// each call opens and closes with events of its own (output_item.added to
// function_call_arguments.done; content_block_start to content_block_stop
// of a tool_use block): the events from a call's start to its end wait in
// o.held, and the completed call is compared with the terminal calls.
func (o *chatObserver) holdAPIEvent(ev *sse.Event, out []byte) ([]byte, bool) {
	o.chunkStarted, o.callDone = -1, -1
	seq := o.racc.Sequence()
	if len(ev.Data) > 0 && ev.Data[0] == '{' {
		if err := o.accumulate(ev.Data); err != nil {
			out = o.releaseHeld(out)
			return append(out, ev.Raw...), false
		}
	}
	if o.cut != nil {
		out = o.releaseHeld(out)
		out = append(out, ev.Raw...)
		return o.appendEnd(out)
	}
	if o.chunkStarted >= 0 {
		if o.holdOpen == 0 {
			// The answer, should it replace this call, takes its place.
			o.holdIndex, o.holdSeq = o.chunkStarted, seq
		}
		o.holdOpen++
	}
	if o.callDone >= 0 && o.holdOpen > 0 {
		if t := o.terminalCall(o.apiToolCall(o.callDone)); t != nil {
			return o.replaceHeld(out, t), true
		}
		if o.holdOpen--; o.holdOpen == 0 {
			out = o.releaseHeld(out)
			return append(out, ev.Raw...), false
		}
	}
	if o.holdOpen > 0 {
		o.held = append(o.held, ev.Raw...)
		return out, false
	}
	return append(out, ev.Raw...), false
}

// terminalCall returns the terminal call a completed call matches, nil if
// none.
func (o *chatObserver) terminalCall(name, args []byte) *terminalCall {
	var key uint64
	key, o.scratch = inspect.CallKey(o.scratch, string(name), string(args))
	for i := range o.terminal {
		if o.terminal[i].key == key {
			return &o.terminal[i]
		}
	}
	return nil
}

// releaseHeld appends the held events and lets go of them.
func (o *chatObserver) releaseHeld(out []byte) []byte {
	out = append(out, o.held...)
	o.held = o.held[:0]
	return out
}

// replaceHeld drops the held tool-call events and appends the LOOP_DETECTED
// answer in the stream's own id and model and its API's shape (Responses:
// a message item; Anthropic: a text block; each where the call began),
// which ends the stream.
func (o *chatObserver) replaceHeld(b []byte, t *terminalCall) []byte {
	o.held = o.held[:0]
	text, err := o.p.inject.TerminateText(activeConstraint(t.constraint))
	if err != nil {
		text = "LOOP_DETECTED: " + t.constraint.Brief
	}
	o.cut = &inspect.Detection{Category: t.constraint.Category, Score: 1,
		Evidence: inspect.Evidence{Tool: t.constraint.Tool, Args: t.constraint.Args}}
	o.replaced = true
	o.p.log.Info().Str("session", o.pl.key).Str("category", string(t.constraint.Category)).
		Str("pattern_key", t.constraint.Pattern).Str("tool", t.constraint.Tool).
		Msg("held tool call replaced by LOOP_DETECTED")
	if o.pl.api != chatAPI {
		return o.appendAPIEnd(b, text)
	}

	b = append(b, "data: "...)
	b = o.appendChunkHead(b)
	b = append(b, `"choices":[{"index":0,"delta":{"role":"assistant","content":`...)
	b = rawjson.AppendQuote(b, text)
	b = append(b, `},"finish_reason":null}]}`+"\n\n"...)
	b = append(b, "data: "...)
	b = o.appendChunkHead(b)
	b = append(b, `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"...)
	return append(b, "data: [DONE]\n\n"...)
}
