package proxy

import (
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// trimmed is one event held back with stream.tail = "trim": its bytes in
// o.trimBuf and the span of the answer's text (chat: choice 0's content) it
// carries.
type trimmed struct {
	raw, name, data [2]int // [start, end) in trimBuf
	start, end      int64  // text offsets before and after the event
}

// trimEvent handles one event with tail = "trim": events wait until
// TrimWindow bytes of content have followed them, so that when the stream
// degenerates the client's text can end where the repetition began instead of
// after the copies the detector needed to be sure. What is still held when
// the stream ends goes out through end. It serves every API: the text is
// what the accumulator of the request's API reports.
func (o *chatObserver) trimEvent(ev *sse.Event, out []byte) ([]byte, bool) {
	before := o.text0
	if len(ev.Data) > 0 && ev.Data[0] == '{' {
		_ = o.accumulate(ev.Data) // an unreadable event is held and forwarded as it is
	}
	t := trimmed{start: before, end: o.text0}
	t.raw = o.keepTrimmed(ev.Raw)
	t.name = o.keepTrimmed(ev.Name)
	t.data = o.keepTrimmed(ev.Data)
	o.trimQ = append(o.trimQ, t)

	if o.cut == nil {
		return o.releaseTrimmed(out, o.text0-int64(o.p.cfg.Stream.TrimWindow)), false
	}
	if o.cutSlot != 1 {
		out = o.releaseTrimmed(out, 1<<62)
		return o.appendEnd(out)
	}
	// Release what lies before the repetition, cut the event it starts in,
	// drop the rest.
	x := o.cutOffset
	out = o.releaseTrimmed(out, x)
	if len(o.trimQ) > 0 && o.trimQ[0].start < x {
		out = o.appendTruncated(out, &o.trimQ[0], int(x-o.trimQ[0].start))
	}
	o.trimQ = o.trimQ[:0]
	if o.pl.api == responsesAPI {
		// The cut tail reports the text as the client got it.
		o.racc.DropText(int(o.text0 - x))
	}
	return o.appendEnd(out)
}

// keepTrimmed copies b into trimBuf and returns its span there.
func (o *chatObserver) keepTrimmed(b []byte) [2]int {
	start := len(o.trimBuf)
	o.trimBuf = append(o.trimBuf, b...)
	return [2]int{start, len(o.trimBuf)}
}

// releaseTrimmed appends the held events whose content ends at or before
// upTo and lets go of them.
func (o *chatObserver) releaseTrimmed(out []byte, upTo int64) []byte {
	n := 0
	for n < len(o.trimQ) && o.trimQ[n].end <= upTo {
		t := o.trimQ[n]
		out = append(out, o.trimBuf[t.raw[0]:t.raw[1]]...)
		n++
	}
	if n == 0 {
		return out
	}
	o.trimQ = append(o.trimQ[:0], o.trimQ[n:]...)
	if len(o.trimQ) == 0 {
		o.trimBuf = o.trimBuf[:0]
	}
	return out
}

// appendTruncated appends a held event with its text cut to keep bytes.
func (o *chatObserver) appendTruncated(out []byte, t *trimmed, keep int) []byte {
	data := o.trimBuf[t.data[0]:t.data[1]]
	path := textDeltaPath[o.pl.api.name]
	content := gjson.GetBytes(data, path).String()
	if keep <= 0 || keep > len(content) {
		return out
	}
	chunk, err := sjson.SetBytes(append([]byte(nil), data...), path, content[:keep])
	if err != nil {
		return out
	}
	if t.name[1] > t.name[0] {
		out = append(out, "event: "...)
		out = append(out, o.trimBuf[t.name[0]:t.name[1]]...)
		out = append(out, '\n')
	}
	out = append(out, "data: "...)
	out = append(out, chunk...)
	return append(out, "\n\n"...)
}

// textDeltaPath is where an event of each API carries the text it adds
// (chat: choice 0's content; Responses: output_text.delta; Anthropic:
// text_delta).
var textDeltaPath = map[inspect.API]string{
	inspect.ChatCompletions:   "choices.0.delta.content",
	inspect.Responses:         "delta",
	inspect.AnthropicMessages: "delta.text",
}
