package proxy

import (
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// trimmed is one event held back with stream.tail = "trim": its bytes in
// o.trimBuf and the span of choice 0's content it carries.
type trimmed struct {
	raw, data  [2]int // [start, end) in trimBuf
	start, end int64  // choice 0 content offsets before and after the event
}

// trimEvent handles one event with tail = "trim": events wait until
// TrimWindow bytes of content have followed them, so that when the stream
// degenerates the client's text can end where the repetition began instead of
// after the copies the detector needed to be sure. What is still held when
// the stream ends goes out through end.
func (o *chatObserver) trimEvent(ev *sse.Event, out []byte) ([]byte, bool) {
	before := o.text0
	if len(ev.Data) > 0 && ev.Data[0] == '{' {
		_ = o.acc.Add(ev.Data, o.delta) // an unreadable chunk is held and forwarded as it is
	}
	t := trimmed{start: before, end: o.text0}
	t.raw[0] = len(o.trimBuf)
	o.trimBuf = append(o.trimBuf, ev.Raw...)
	t.raw[1] = len(o.trimBuf)
	t.data[0] = len(o.trimBuf)
	o.trimBuf = append(o.trimBuf, ev.Data...)
	t.data[1] = len(o.trimBuf)
	o.trimQ = append(o.trimQ, t)

	if o.cut == nil {
		return o.releaseTrimmed(out, o.text0-int64(o.p.cfg.Stream.TrimWindow)), false
	}
	if !o.cutInText0 {
		out = o.releaseTrimmed(out, 1<<62)
		return o.appendCut(out), true
	}
	// Release what lies before the repetition, cut the event it starts in,
	// drop the rest.
	x := o.cutOffset
	out = o.releaseTrimmed(out, x)
	if len(o.trimQ) > 0 && o.trimQ[0].start < x {
		out = o.appendTruncated(out, &o.trimQ[0], int(x-o.trimQ[0].start))
	}
	o.trimQ = o.trimQ[:0]
	return o.appendCut(out), true
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

// appendTruncated appends a held chunk with its content cut to keep bytes.
func (o *chatObserver) appendTruncated(out []byte, t *trimmed, keep int) []byte {
	data := o.trimBuf[t.data[0]:t.data[1]]
	content := gjson.GetBytes(data, "choices.0.delta.content").String()
	if keep <= 0 || keep > len(content) {
		return out
	}
	chunk, err := sjson.SetBytes(append([]byte(nil), data...), "choices.0.delta.content", content[:keep])
	if err != nil {
		return out
	}
	out = append(out, "data: "...)
	out = append(out, chunk...)
	return append(out, "\n\n"...)
}
