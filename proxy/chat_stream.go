package proxy

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
)

// maxWatchedChoices bounds the choices (n > 1) whose text is inspected.
const maxWatchedChoices = 4

// chatObserver inspects one chat answer as it passes: every content and
// reasoning delta feeds a degeneration detector after it was forwarded, and
// tool calls are compared with the earlier calls of the same answer.
type chatObserver struct {
	p  *chatPipeline
	pl *plan

	acc     sse.ChatAccumulator
	racc    sse.ResponsesAccumulator // api = responses
	aacc    sse.AnthropicAccumulator // api = anthropic
	content [maxWatchedChoices]*inspect.Degeneration
	reason  [maxWatchedChoices]*inspect.Degeneration
	calls   []uint64 // CallKey of each completed tool call of choice 0
	checked int      // tool calls of choice 0 already compared
	scratch []byte
	bytes   int64 // text bytes generated so far

	cut       *inspect.Detection
	cutOffset int64
	cutAt     time.Time
	status    int
	done      func(*ChatEvent)

	// Holding tool calls (stream.hold_tool_calls), only while a call the
	// ladder would end is in play.
	terminal     []terminalCall
	held         []byte // raw events waiting for their tool calls to complete
	holdChecked  int    // tool calls of choice 0 already compared with terminal
	chunkTools   bool   // the current chunk carried tool-call deltas for choice 0
	chunkStarted int    // a call that began in the current chunk, -1 if none (Responses, Anthropic: its output_index or block index)
	callDone     int    // Responses, Anthropic: the call the current event completed, -1 if none
	holdOpen     int    // Responses, Anthropic: calls begun and not completed
	holdIndex    int    // Responses, Anthropic: output_index or block index of the first held call
	holdSeq      int    // Responses: the last sequence_number sent before the held events
	chunkFinish  bool   // the current chunk finished choice 0
	replaced     bool   // a held call was replaced by LOOP_DETECTED

	encoded   bool // the answer is compressed: forward it uninspected
	abandoned bool // a call panicked: not returned to the pool

	bodyUsage observe.Usage // the usage of a non-streamed answer

	// A non-streamed Responses answer's id and output items, for the record.
	respID     string
	respOutput string
	recorded   bool // the record was saved when the stream completed
	cutPending bool // a duplicate Responses call: cut once its item is done

	// tail = "trim": events held until TrimWindow content bytes follow them.
	trim    bool
	text0   int64 // choice 0 content bytes so far
	trimQ   []trimmed
	trimBuf []byte

	// arrivals remembers when recent events came and how far choice 0's
	// content and reasoning had got, to time a cut from the arrival of the
	// first degenerate byte.
	arrivals  [128]arrival
	nArrivals int
	reason0   int64 // choice 0 reasoning bytes so far
	cutSlot   int   // 1: the cut came from choice 0's content, 2: its reasoning, 0: elsewhere
}

type arrival struct {
	at                 int64 // unix nanoseconds
	content, reasoning int64
}

var observerPool = sync.Pool{New: func() any {
	o := new(chatObserver)
	// The detectors see each delta; nothing reads the answer's text
	// afterwards, so an open stream does not hold it (issue 18).
	o.acc.DropText = true
	return o
}}

func newChatObserver(p *chatPipeline, pl *plan, done func(*ChatEvent)) *chatObserver {
	o := observerPool.Get().(*chatObserver)
	o.p, o.pl, o.done = p, pl, done
	if p.cfg.Stream.HoldToolCalls && pl.stream && !pl.passive {
		o.terminal = terminalCalls(p.policy.Config().Ladder, &pl.decision)
	}
	o.trim = p.cfg.Stream.Tail == TailTrim && o.cuts()
	return o
}

// cuts reports whether this answer may be cut: stream.cut is on and the
// request's policy mode is enforce (shadow and off change nothing).
func (o *chatObserver) cuts() bool { return o.p.cfg.Stream.Cut && !o.pl.passive }

func (o *chatObserver) abandon() { o.abandoned = true }

// release returns o and its detectors to the pool, unless a panic left them
// in a state no other answer should inherit.
func (o *chatObserver) release() {
	if o.abandoned {
		return
	}
	for i := range o.content {
		if d := o.content[i]; d != nil {
			d.Reset()
		}
		if d := o.reason[i]; d != nil {
			d.Reset()
		}
	}
	o.acc.Reset()
	o.racc.Reset()
	o.aacc.Reset()
	o.calls, o.checked, o.bytes = o.calls[:0], 0, 0
	o.cut, o.cutOffset, o.cutAt, o.status = nil, 0, time.Time{}, 0
	o.terminal, o.held, o.holdChecked, o.replaced, o.encoded = o.terminal[:0], o.held[:0], 0, false, false
	o.holdOpen, o.holdIndex, o.holdSeq = 0, 0, 0
	o.trim, o.text0, o.trimQ, o.trimBuf = false, 0, o.trimQ[:0], o.trimBuf[:0]
	o.nArrivals, o.reason0, o.cutSlot = 0, 0, 0
	o.respID, o.respOutput, o.recorded, o.cutPending = "", "", false, false
	o.bodyUsage = observe.Usage{}
	o.p, o.pl, o.done = nil, nil, nil
	observerPool.Put(o)
}

func (o *chatObserver) header(status int, h *fasthttp.ResponseHeader) {
	o.status = status
	setLoopHeaders(h, o.pl)
	// We asked for identity; an upstream that compresses anyway is passed
	// through uninspected rather than parsed as garbage (proxy-notes P2).
	if ce := h.Peek(fasthttp.HeaderContentEncoding); len(ce) > 0 && !asciiEqualFold(ce, "identity") {
		o.encoded = true
	}
}

func (o *chatObserver) event(ev *sse.Event, out []byte) ([]byte, bool) {
	if o.encoded {
		return append(out, ev.Raw...), false
	}
	if o.pl.api != inspect.ChatCompletions {
		return o.apiEvent(ev, out)
	}
	if len(o.terminal) > 0 && o.cut == nil {
		return o.holdEvent(ev, out)
	}
	if o.trim && o.cut == nil {
		return o.trimEvent(ev, out)
	}
	if o.cut != nil || len(ev.Data) == 0 || ev.Data[0] != '{' || !o.cuts() {
		return append(out, ev.Raw...), false
	}
	if bytes.Contains(ev.Data, toolCallsKey) {
		// A chunk that may open a tool call or finish the calls is read
		// before it is forwarded: when it shows that the call before it was
		// a duplicate, the cut replaces it, so the agent never sees the
		// start of a further call (an empty, unrunnable one).
		_ = o.acc.Add(ev.Data, o.delta)
		if o.cut != nil {
			return o.appendCut(out), true
		}
		return append(out, ev.Raw...), false
	}
	// Forward first: inspection never holds back content.
	out = append(out, ev.Raw...)
	if err := o.acc.Add(ev.Data, o.delta); err != nil {
		return out, false // an upstream error event or a chunk we cannot read: forward only
	}
	if o.cut == nil {
		return out, false
	}
	return o.appendCut(out), true
}

// accumulate folds one event's data into the accumulator of the request's
// API, which reports what it added to delta or update.
func (o *chatObserver) accumulate(data []byte) error {
	switch o.pl.api {
	case inspect.Responses:
		return o.racc.Add(data, o.update)
	case inspect.AnthropicMessages:
		return o.aacc.Add(data, o.update)
	}
	return o.acc.Add(data, o.delta)
}

// appendEnd appends the end of a cut stream in the request's API; a
// duplicate Responses call is let through to its item's end first
// (cutPending), so the stream goes on.
func (o *chatObserver) appendEnd(out []byte) ([]byte, bool) {
	switch {
	case o.pl.api == inspect.ChatCompletions:
		return o.appendCut(out), true
	case o.pl.api == inspect.Responses && o.cut.Category == inspect.ToolRepetition:
		o.cutPending = true
		return out, false
	}
	return o.appendAPICut(out), true
}

// end releases what the observer still holds when the stream is over
// without a cut (the upstream finished, failed or went idle): the events
// tail = "trim" keeps back and the held tool-call events. Held events wait
// for what follows them; at the end nothing follows, and the client must
// get every byte the upstream sent (issue 10).
func (o *chatObserver) end(out []byte) []byte {
	out = o.releaseTrimmed(out, 1<<62)
	return o.releaseHeld(out)
}

// toolCallsKey marks chunks that carry tool calls or finish them.
var toolCallsKey = []byte(`"tool_calls"`)

// delta inspects what one chunk added to one choice.
func (o *chatObserver) delta(d sse.Delta) {
	if o.cut != nil || d.Choice < 0 || d.Choice >= maxWatchedChoices {
		return
	}
	o.bytes += int64(len(d.Content) + len(d.Reasoning))
	if d.Choice == 0 {
		o.text0 += int64(len(d.Content))
		o.reason0 += int64(len(d.Reasoning))
		o.arrive()
	}
	if len(d.Content) > 0 && o.watch(&o.content[d.Choice], d.Content) {
		if d.Choice == 0 {
			o.cutSlot = 1
		}
		return
	}
	if len(d.Reasoning) > 0 && o.watch(&o.reason[d.Choice], d.Reasoning) {
		if d.Choice == 0 {
			o.cutSlot = 2
		}
		return
	}
	if d.Choice == 0 {
		o.chunkTools = o.chunkTools || d.ToolCall
		if d.ToolCallStarted >= 0 {
			o.chunkStarted = d.ToolCallStarted
		}
		o.chunkFinish = o.chunkFinish || d.FinishReason != nil
		if d.ToolCall || d.FinishReason != nil {
			o.compareCalls(d)
		}
	}
}

// arrive notes the time and choice 0's text offsets after a delta.
func (o *chatObserver) arrive() {
	o.arrivals[o.nArrivals%len(o.arrivals)] = arrival{at: time.Now().UnixNano(), content: o.text0, reasoning: o.reason0}
	o.nArrivals++
}

// cutDelay is the time from the arrival of the first degenerate byte to
// the cut, or 0 when the cut was not in choice 0's text. When that byte is
// older than the remembered events, the oldest one bounds it from below.
func (o *chatObserver) cutDelay() time.Duration {
	if o.cutSlot == 0 || o.nArrivals == 0 {
		return 0
	}
	n := min(o.nArrivals, len(o.arrivals))
	first := o.arrivals[(o.nArrivals-n)%len(o.arrivals)].at
	for i := o.nArrivals - n; i < o.nArrivals; i++ {
		a := o.arrivals[i%len(o.arrivals)]
		end := a.content
		if o.cutSlot == 2 {
			end = a.reasoning
		}
		if end > o.cutOffset {
			first = a.at
			break
		}
	}
	return o.cutAt.Sub(time.Unix(0, first))
}

// watch feeds text to a (lazily created) detector and records a cut.
func (o *chatObserver) watch(slot **inspect.Degeneration, text []byte) bool {
	if *slot == nil {
		*slot = inspect.NewDegeneration(o.p.cfg.Detect.Stream)
	}
	if !(*slot).Write(text) {
		return false
	}
	det := (*slot).Detection()
	o.cut, o.cutOffset, o.cutAt = &det, (*slot).Offset(), time.Now()
	return true
}

// compareCalls checks the tool calls completed so far in choice 0: a call
// identical (name + canonical arguments) to an earlier one of the same answer
// is a degenerate burst, cut right after that first duplicate.
func (o *chatObserver) compareCalls(d sse.Delta) {
	complete := o.checked
	switch {
	case d.FinishReason != nil:
		complete = int(^uint(0) >> 1) // every call is complete
	case d.ToolCallStarted >= 0:
		complete = d.ToolCallStarted
	}
	for ; o.checked < complete && o.cut == nil; o.checked++ {
		name, args, ok := o.acc.ToolCallBytes(0, o.checked)
		if !ok {
			return
		}
		o.noteCall(name, args)
	}
}

// noteCall compares a completed tool call with the earlier calls of the
// answer and records a cut at the first duplicate.
func (o *chatObserver) noteCall(name, args []byte) {
	var key uint64
	key, o.scratch = inspect.CallKey(o.scratch, string(name), string(args))
	for _, k := range o.calls {
		if k == key {
			o.cut = &inspect.Detection{
				Category: inspect.ToolRepetition,
				Score:    1,
				Evidence: inspect.Evidence{Element: string(name), Tool: string(name), Count: 2, Threshold: 2},
			}
			o.cutAt = time.Now()
			return
		}
	}
	o.calls = append(o.calls, key)
}

// appendCut appends the end of the client's stream after a cut, well-formed:
// a comment naming the rule, a final chunk carrying the stream's id, model
// and created, a usage chunk if the request asked for one, and [DONE].
func (o *chatObserver) appendCut(b []byte) []byte {
	b = append(b, ": loopguard cut category="...)
	b = append(b, o.cut.Category...)
	b = append(b, " offset="...)
	b = strconv.AppendInt(b, o.cutOffset, 10)
	b = append(b, "\n\n"...)

	finish := o.p.cfg.Stream.FinishReason
	if o.cut.Category == inspect.ToolRepetition {
		finish = "tool_calls"
	}
	n := len(o.acc.Choices())
	if n == 0 {
		n = 1
	}
	for i := 0; i < n; i++ {
		b = append(b, "data: "...)
		b = o.appendChunkHead(b)
		b = append(b, `"choices":[{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"delta":{},"finish_reason":`...)
		b = rawjson.AppendQuote(b, finish)
		b = append(b, "}]}\n\n"...)
	}
	if o.pl.usage {
		prompt := 0
		if u, ok := o.acc.Usage(); ok {
			prompt = u.PromptTokens
		}
		completion := estimateTokens(o.bytes)
		b = append(b, "data: "...)
		b = o.appendChunkHead(b)
		b = append(b, `"choices":[],"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(prompt), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(completion), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(prompt+completion), 10)
		// completion_tokens is counted by loopguard, not by the model.
		b = append(b, `,"estimated":true}}`+"\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// appendChunkHead writes the id, object, created and model members of a
// chunk of this stream, opening the object.
func (o *chatObserver) appendChunkHead(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = rawjson.AppendQuote(b, o.acc.ID())
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, o.acc.Created(), 10)
	b = append(b, `,"model":`...)
	model := o.acc.Model()
	if model == "" {
		model = o.pl.model
	}
	b = rawjson.AppendQuote(b, model)
	return append(b, ',')
}

// estimateTokens turns generated text bytes into tokens at about four bytes a token.
func estimateTokens(n int64) int { return int((n + 3) / 4) }

// body inspects a non-streamed chat answer: a degenerate text is cut at the
// offset where the repetition began, with finish_reason set as for streams.
func (o *chatObserver) body(status int, b []byte) []byte {
	if status != fasthttp.StatusOK || o.encoded || !rawjson.Valid(b) {
		return nil
	}
	o.bodyUsage = answerUsage(b)
	out := o.cutBody(b)
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

// cutBody cuts a degenerate non-streamed answer; nil when it is left alone.
func (o *chatObserver) cutBody(b []byte) []byte {
	if !o.cuts() {
		return nil
	}
	if o.pl.api != inspect.ChatCompletions {
		return o.apiBody(b)
	}
	out := b
	changed := false
	gjson.GetBytes(b, "choices").ForEach(func(i, ch gjson.Result) bool {
		text := ch.Get("message.content")
		if text.Type != gjson.String || i.Int() >= maxWatchedChoices {
			return true
		}
		slot := &o.content[min(int(i.Int()), maxWatchedChoices-1)]
		if *slot == nil {
			*slot = inspect.NewDegeneration(o.p.cfg.Detect.Stream)
		}
		d := *slot
		s := text.String()
		o.bytes += int64(len(s))
		if !d.Write([]byte(s)) {
			return true
		}
		det := d.Detection()
		off := d.Offset()
		if off < 0 || off > int64(len(s)) {
			off = int64(len(s))
		}
		o.cut, o.cutOffset, o.cutAt = &det, off, time.Now()
		idx := strconv.FormatInt(i.Int(), 10)
		var err error
		if out, err = sjson.SetBytes(out, "choices."+idx+".message.content", s[:off]); err != nil {
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

// finish records a cut in the session, so the next request tells the model
// its answer degenerated, and returns o to the pool.
func (o *chatObserver) finish(cause error, info *observe.ResponseInfo) {
	saved := 0
	if o.cut != nil && o.pl.maxTok > 0 {
		saved = max(0, int(o.pl.maxTok)-estimateTokens(o.bytes))
	}
	info.Session = o.pl.key
	info.Usage = o.usage()
	if o.pl.record != nil && !o.recorded && info.Status == fasthttp.StatusOK {
		if o.respID != "" {
			o.p.saveRecord(o.pl, o.respID, gjson.Parse(o.respOutput))
		} else if id := o.racc.ID(); id != "" {
			o.p.saveRecord(o.pl, id, gjson.ParseBytes(o.racc.AppendOutput(nil)))
		}
	}
	if o.cut != nil && !o.replaced {
		info.Cut = policy.Cut{Category: o.cut.Category, Offset: o.cutOffset, TokensSaved: saved, At: o.cutAt}
		info.CutDelay = o.cutDelay()
		if o.pl.key != "" {
			t := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), o.p.storeTimeout)
			if err := o.p.policy.RecordCut(ctx, o.pl.key, info.Cut); err != nil {
				o.p.failOpen(nil, "store", err)
			}
			cancel()
			info.CutStoreDuration = time.Since(t)
		}
	}
	if errors.Is(cause, errCut) {
		// Closing the connection does not stop a resumable stream.
		o.pl.resume.stop()
	}
	if o.done != nil {
		ev := o.pl.event()
		ev.Status = info.Status
		ev.Cut, ev.CutOffset, ev.TokensSaved = o.cut, o.cutOffset, saved
		o.done(&ev)
	}
	o.release()
}

var _ responseObserver = (*chatObserver)(nil)
