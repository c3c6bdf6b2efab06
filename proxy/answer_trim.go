package proxy

import (
	"bytes"
	"unicode/utf8"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// trimmer holds events back with stream.tail = "trim" until TrimWindow
// bytes of text have followed them, so that when the stream degenerates
// the client's text can end where the repetition began instead of after the
// copies the detector needed to be sure. What is still held when the
// stream ends goes out through the observer's end. It serves every API:
// the text is what the request's answer reports.
type trimmer struct {
	queue []trimmed
	buf   []byte
	// dropped is the text a cut kept from the client: the end of the
	// stream reports the text as the client got it (ending.dropped).
	dropped int64
}

// trimmed is one event held back: its bytes in trimmer.buf and the span of
// the answer's text (chat: choice 0's content) it carries.
type trimmed struct {
	raw, name, data [2]int // [start, end) in buf
	start, end      int64  // text offsets before and after the event
}

// event handles one event while no cut has come.
func (t *trimmer) event(o *answerObserver, ev *sse.Event, out []byte) ([]byte, bool) {
	w := &o.watch
	before := w.text
	if len(ev.Data) > 0 && ev.Data[0] == '{' {
		_ = o.read(ev.Data) // an unreadable event is held and forwarded as it is
	}
	held := trimmed{start: before, end: w.text}
	held.raw = t.keep(ev.Raw)
	held.name = t.keep(ev.Name)
	held.data = t.keep(ev.Data)
	t.queue = append(t.queue, held)

	window := int64(o.pipeline.cfg.Stream.TrimWindow)
	if w.cut == nil {
		return t.release(out, w.text-window), false
	}
	if w.slot != 1 {
		out = t.release(out, 1<<62)
		return o.appendEnd(out)
	}
	// Release what lies before the repetition, cut the event it starts in,
	// drop the rest.
	x := w.offset
	out = t.release(out, x)
	if len(t.queue) > 0 && t.queue[0].start < x {
		out = t.appendTruncated(out, &t.queue[0], int(x-t.queue[0].start), o.plan.api.textPath, o.plan.api.framing)
	}
	t.queue = t.queue[:0]
	t.dropped = w.text - x
	return o.appendEnd(out)
}

// keep copies b into buf and returns its span there.
func (t *trimmer) keep(b []byte) [2]int {
	start := len(t.buf)
	t.buf = append(t.buf, b...)
	return [2]int{start, len(t.buf)}
}

// release appends the held events whose text ends at or before upTo and
// lets go of them.
func (t *trimmer) release(out []byte, upTo int64) []byte {
	n := 0
	for n < len(t.queue) && t.queue[n].end <= upTo {
		e := t.queue[n]
		out = append(out, t.buf[e.raw[0]:e.raw[1]]...)
		n++
	}
	if n == 0 {
		return out
	}
	t.queue = append(t.queue[:0], t.queue[n:]...)
	if len(t.queue) == 0 {
		t.buf = t.buf[:0]
	}
	return out
}

// appendTruncated appends a held event with the text at path in its data
// cut to keep bytes, or to fewer where keep falls inside a UTF-8 character:
// the client gets whole characters only. An event left with no text is
// dropped. In a stream not framed as SSE the new data takes the old one's
// place among the bytes around it (an NDJSON line's end, a JSON array's
// separators).
func (t *trimmer) appendTruncated(out []byte, e *trimmed, keep int, path string, framing wireapi.Framing) []byte {
	data := t.buf[e.data[0]:e.data[1]]
	content := gjson.GetBytes(data, path).String()
	if keep <= 0 || keep > len(content) {
		return out
	}
	for keep > 0 && keep < len(content) && !utf8.RuneStart(content[keep]) {
		keep-- // the cut fell inside a character: keep the ones before it
	}
	if keep == 0 {
		return out
	}
	chunk, err := sjson.SetBytes(append([]byte(nil), data...), path, content[:keep])
	if err != nil {
		return out
	}
	if raw := t.buf[e.raw[0]:e.raw[1]]; framing != wireapi.SSE {
		if i := bytes.Index(raw, data); i >= 0 {
			out = append(out, raw[:i]...)
			out = append(out, chunk...)
			return append(out, raw[i+len(data):]...)
		}
	}
	if e.name[1] > e.name[0] {
		out = append(out, "event: "...)
		out = append(out, t.buf[e.name[0]:e.name[1]]...)
		out = append(out, '\n')
	}
	out = append(out, "data: "...)
	out = append(out, chunk...)
	return append(out, "\n\n"...)
}

// reset readies t for another answer, keeping its buffers.
func (t *trimmer) reset() {
	*t = trimmer{queue: t.queue[:0], buf: t.buf[:0]}
}
