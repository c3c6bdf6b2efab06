package proxy

import (
	"strconv"
	"strings"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
)

// body inspects a non-streamed answer: a degenerate text is cut at the
// offset where the repetition began, and the answer ends as a cut stream of
// its API ends (chat: finish_reason stream.finish_reason; Responses: the
// message item "incomplete", nothing after it; Anthropic: stop_reason
// "end_turn", no block after it).
func (o *chatObserver) body(status int, b []byte) []byte {
	if status != fasthttp.StatusOK || o.encoded || !rawjson.Valid(b) {
		return nil
	}
	var out []byte
	if o.p.cfg.Stream.Cut {
		switch o.pl.api {
		case inspect.Responses:
			out = o.cutItems(b, "output", responsesTexts, markResponsesCut)
		case inspect.AnthropicMessages:
			out = o.cutItems(b, "content", anthropicTexts, markAnthropicCut)
		default:
			out = o.cutChoices(b)
		}
	}
	if o.pl.record != nil {
		// The record holds the output as the agent got it.
		answer := b
		if out != nil {
			answer = out
		}
		res := gjson.GetManyBytes(answer, "id", "output")
		o.respID, o.respOutput = res[0].String(), res[1].Raw
	}
	return out
}

// cutText feeds s, which follows before bytes the detector in slot has
// read, to that detector; at a cut it records it and returns how much of s
// to keep.
func (o *chatObserver) cutText(slot **inspect.Degeneration, s string, before int64) (keep int, cut bool) {
	if *slot == nil {
		*slot = inspect.NewDegeneration(o.p.cfg.Detect.Stream)
	}
	d := *slot
	o.bytes += int64(len(s))
	if !d.Write([]byte(s)) {
		return 0, false
	}
	det := d.Detection()
	off := d.Offset()
	if off < before || off > before+int64(len(s)) {
		off = before + int64(len(s))
	}
	o.cut, o.cutOffset, o.cutAt = &det, off, time.Now()
	return int(off - before), true
}

// cutChoices cuts a chat answer: each choice's content has its own detector.
func (o *chatObserver) cutChoices(b []byte) []byte {
	out := b
	changed := false
	gjson.GetBytes(b, "choices").ForEach(func(i, ch gjson.Result) bool {
		text := ch.Get("message.content")
		if text.Type != gjson.String || i.Int() >= maxWatchedChoices {
			return true
		}
		s := text.String()
		keep, cut := o.cutText(&o.content[i.Int()], s, 0)
		if !cut {
			return true
		}
		idx := strconv.FormatInt(i.Int(), 10)
		var err error
		if out, err = sjson.SetBytes(out, "choices."+idx+".message.content", s[:keep]); err != nil {
			return false
		}
		if out, err = sjson.SetBytes(out, "choices."+idx+".finish_reason", o.p.cfg.Stream.FinishReason); err != nil {
			return false
		}
		changed = true
		return true
	})
	if !changed {
		return nil
	}
	return out
}

// cutItems cuts a Responses or Anthropic answer, whose texts lie in the
// items of one array (output items, content blocks) and read as one text,
// as a stream of that API does: the items before the one the repetition
// began in are kept, that item's text is cut and the item marked, the
// items after it are dropped (a cut stream never showed them).
func (o *chatObserver) cutItems(b []byte, array string, texts func(gjson.Result) []string,
	mark func(answer, item []byte, textPath string) ([]byte, []byte, error)) []byte {
	var before int64
	var kept []byte
	var out []byte
	gjson.GetBytes(b, array).ForEach(func(_, item gjson.Result) bool {
		for _, path := range texts(item) {
			s := item.Get(path).String()
			keep, cut := o.cutText(&o.content[0], s, before)
			before += int64(len(s))
			if !cut {
				continue
			}
			cutItem, err := sjson.SetBytes([]byte(item.Raw), path, s[:keep])
			if err != nil {
				return false
			}
			answer := b
			if answer, cutItem, err = mark(answer, cutItem, path); err != nil {
				return false
			}
			if len(kept) > 0 {
				kept = append(kept, ',')
			}
			kept = append(append(kept, cutItem...), ']')
			out, err = sjson.SetRawBytes(answer, array, append([]byte{'['}, kept...))
			if err != nil {
				out = nil
			}
			return false
		}
		if len(kept) > 0 {
			kept = append(kept, ',')
		}
		kept = append(kept, item.Raw...)
		return true
	})
	return out
}

// responsesTexts lists the output_text parts of a Responses output item.
func responsesTexts(item gjson.Result) []string {
	if item.Get("type").String() != "message" {
		return nil
	}
	var paths []string
	item.Get("content").ForEach(func(i, part gjson.Result) bool {
		if part.Get("type").String() == "output_text" {
			paths = append(paths, "content."+i.String()+".text")
		}
		return true
	})
	return paths
}

// markResponsesCut marks a cut message item "incomplete" and drops its
// parts after the cut one, as a cut stream closes the open message.
func markResponsesCut(answer, item []byte, textPath string) ([]byte, []byte, error) {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(textPath, "content."), ".text"))
	parts := gjson.GetBytes(item, "content")
	var err error
	for i := len(parts.Array()) - 1; i > n && err == nil; i-- {
		item, err = sjson.DeleteBytes(item, "content."+strconv.Itoa(i))
	}
	if err == nil {
		item, err = sjson.SetBytes(item, "status", "incomplete")
	}
	return answer, item, err
}

// anthropicTexts lists the text of an Anthropic text block.
func anthropicTexts(block gjson.Result) []string {
	if block.Get("type").String() != "text" {
		return nil
	}
	return []string{"text"}
}

// markAnthropicCut sets the stop reason of a cut stream, end_turn.
func markAnthropicCut(answer, block []byte, _ string) ([]byte, []byte, error) {
	answer, err := sjson.SetBytes(answer, "stop_reason", "end_turn")
	return answer, block, err
}
