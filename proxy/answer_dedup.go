package proxy

import (
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/sse"
)

// callDedup compares the tool calls of one answer (chat: of choice 0) as
// they complete: a call identical (name + canonical arguments) to an
// earlier one of the same answer is a degenerate burst, cut right after
// that first duplicate.
type callDedup struct {
	calls   []uint64 // CallKey of each completed call
	checked int      // chat: calls already compared
	scratch []byte
}

// note compares the calls that u shows complete: the one it completed
// (Responses, Anthropic), or each call before the one a chat chunk began,
// or every call once the choice finished.
func (d *callDedup) note(u *sse.Update, a answer, w *cutWatch) {
	if u.ToolCallDone >= 0 {
		if name, args, ok := a.toolCall(u.ToolCallDone); ok {
			d.compare(name, args, w)
		}
		return
	}
	if !u.ToolCall && !(u.FinishReason != nil) {
		return
	}
	complete := d.checked
	switch {
	case (u.FinishReason != nil):
		complete = int(^uint(0) >> 1) // every call is complete
	case u.ToolCallStarted >= 0:
		complete = u.ToolCallStarted
	}
	for ; d.checked < complete && w.cut == nil; d.checked++ {
		name, args, ok := a.toolCall(d.checked)
		if !ok {
			return
		}
		d.compare(name, args, w)
	}
}

// compare compares a completed tool call with the earlier calls of the
// answer and records a cut in w at the first duplicate.
func (d *callDedup) compare(name, args []byte, w *cutWatch) {
	var key uint64
	key, d.scratch = inspect.CallKey(d.scratch, string(name), string(args))
	for _, k := range d.calls {
		if k == key {
			cutDuplicate(name, w)
			return
		}
	}
	d.calls = append(d.calls, key)
}

// cutDuplicate records the cut of a duplicate call of name in w. Not
// inlined in compare: the detection it builds would be in the frame every
// completed call is keyed under (docs/streams.md).
//
//go:noinline
func cutDuplicate(name []byte, w *cutWatch) {
	w.cutAt(inspect.Detection{
		Category: inspect.ToolRepetition,
		Score:    1,
		Evidence: inspect.Evidence{Element: string(name), Tool: string(name), Count: 2, Threshold: 2},
	}, 0)
}

// reset readies d for another answer, keeping its buffers.
func (d *callDedup) reset() {
	*d = callDedup{calls: d.calls[:0], scratch: d.scratch[:0]}
}
