package proxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// answerObserver watches the answer to one guarded request as it passes:
// its API's answer reads each event, and small parts, each owning its
// state, act on what it read:
//
//   - watch (answer_cut.go): degeneration of the text, and the cut;
//   - dedup (answer_dedup.go): duplicate tool calls in one answer;
//   - holder (answer_hold.go): stream.hold_tool_calls;
//   - trimmer (answer_trim.go): stream.tail = "trim";
//   - record (answer_record.go): the Responses history record.
//
// The API's answer writes the end of a cut stream in its own shape
// (api_chat.go, api_responses.go, api_anthropic.go). Observers are pooled.
type answerObserver struct {
	answer answer
	// endPending: the cut's end waits for an event (deferredEnd).
	endPending bool
	encoded    bool // the answer is compressed: forward it uninspected
	// What the request asks of its answer, fixed when the observer
	// starts: mayCut (see cuts), holding (holdCalls), trimming
	// (stream.tail = "trim") and recording (record.active).
	mayCut, holding, trimming, recording bool

	pipeline  *pipeline
	plan      *plan
	done      func(*ChatEvent)
	status    int
	abandoned bool // a call panicked: not returned to the pool

	watch   cutWatch
	dedup   callDedup
	holder  callHolder
	trimmer trimmer
	record  answerRecord

	bodyUsage observe.Usage // the usage of a non-streamed answer
}

var observerPool = sync.Pool{New: func() any { return new(answerObserver) }}

func newAnswerObserver(p *pipeline, pl *plan, done func(*ChatEvent)) *answerObserver {
	o := observerPool.Get().(*answerObserver)
	o.start(p, pl, done)
	return o
}

// start readies a reset observer for the answer to pl.
func (o *answerObserver) start(p *pipeline, pl *plan, done func(*ChatEvent)) {
	o.pipeline, o.plan, o.done = p, pl, done
	o.answer = pl.api.newAnswer()
	o.watch.cfg = &p.cfg.Detect.Stream
	o.record.start(p, pl, o.answer)
	o.recording = o.record.active()
	if p.cfg.Stream.HoldToolCalls && pl.stream && !pl.passive {
		o.holdCalls(terminalCalls(p.policy.Config().Ladder, &pl.decision))
	}
	o.mayCut = p.cfg.Stream.Cut && !pl.passive
	o.trimming = p.cfg.Stream.Tail == TailTrim && o.mayCut
}

// cuts reports whether this answer may be cut: stream.cut is on and the
// request's policy mode is enforce (shadow and off change nothing).
func (o *answerObserver) cuts() bool { return o.mayCut }

// holdCalls makes the holder hold tool calls while one of terminal is in
// play (stream.hold_tool_calls); none holds nothing.
func (o *answerObserver) holdCalls(terminal []terminalCall) {
	o.holder.terminal = terminal
	o.holding = len(terminal) > 0
}

func (o *answerObserver) abandon() { o.abandoned = true }

// release returns o, its parts and its answer to their pools, unless a
// panic left them in a state no other answer should inherit.
func (o *answerObserver) release() {
	if o.abandoned {
		return
	}
	o.reset()
	observerPool.Put(o)
}

// reset readies o for another answer: its parts keep what they allocated,
// everything else starts over.
func (o *answerObserver) reset() {
	if o.answer != nil {
		o.answer.release()
	}
	o.watch.reset()
	o.dedup.reset()
	o.holder.reset()
	o.trimmer.reset()
	*o = answerObserver{watch: o.watch, dedup: o.dedup, holder: o.holder, trimmer: o.trimmer}
}

func (o *answerObserver) header(status int, h *fasthttp.ResponseHeader) {
	o.status = status
	setLoopHeaders(h, o.plan)
	// We asked for identity; an answer the upstream compresses anyway is
	// never parsed as it comes (docs/streams.md: compression): a stream is
	// read through its decoder (codedEvent), a body decoded whole (body).
	if ce := h.Peek(fasthttp.HeaderContentEncoding); len(ce) > 0 && !asciiEqualFold(ce, "identity") {
		o.encoded = true
	}
}

// event handles one event: the parts that hold events back (holder,
// trimmer) take it while they are on; otherwise it is forwarded, then read
// (or read first, where the answer says so), and a cut ends the stream in
// the answer's shape.
func (o *answerObserver) event(ev *sse.Event, out []byte) ([]byte, bool) {
	if o.encoded {
		return append(out, ev.Raw...), false
	}
	if o.watch.cut == nil {
		switch {
		case o.recording && o.record.completes(ev):
			return o.recordAnswer(ev, out), false
		case o.holding:
			return o.plan.api.holdEvent(&o.holder, o, ev, out)
		case o.trimming:
			return o.trimmer.event(o, ev, out)
		}
	} else if o.endPending {
		return o.answer.(deferredEnd).appendDeferredEnd(ev, out, o.ending()), true
	}
	if o.watch.cut != nil || len(ev.Data) == 0 || ev.Data[0] != '{' || !o.mayCut && !o.recording {
		return append(out, ev.Raw...), false
	}
	// Nothing reaches the client before event returns, so reading the
	// event before appending it holds nothing back; only a cut asks
	// whether the event is one the answer reads first (readFirst, a pure
	// function of the data), which the cut then replaces: most events
	// never pay for that scan (docs/streams.md).
	err := o.answer.add(ev.Data, o)
	if o.watch.cut == nil || !o.mayCut {
		return append(out, ev.Raw...), false
	}
	if o.answer.readFirst(ev.Data) {
		return o.appendEnd(out)
	}
	out = append(out, ev.Raw...)
	if err != nil {
		return out, false // an upstream error event or a chunk we cannot read: forward only
	}
	return o.appendEnd(out)
}

// codedEvent reads ev of a stream the upstream compressed (codedStream):
// the client got the event, coded as the upstream sent it, before it was
// decoded, so nothing can be held back or replaced, and a cut ends the
// stream after the events the client has. Those that came after the cut
// are read into the answer all the same, so that the end reports the
// stream as the client got it (sequence numbers, open blocks). ready: the
// answer is cut and its end (codedEnd) may follow now.
func (o *answerObserver) codedEvent(ev *sse.Event) (ready bool) {
	if len(ev.Data) == 0 || ev.Data[0] != '{' {
		return o.watch.cut != nil && !o.endPending
	}
	if o.watch.cut != nil {
		_ = o.answer.add(ev.Data, o)
		// The event an end waited for (deferredEnd) has come, or another
		// that will not wait with it.
		o.endPending = false
		return true
	}
	if o.recording && o.record.completes(ev) {
		o.recordAnswer(ev, nil)
		return false
	}
	if !o.mayCut && !o.recording {
		return false
	}
	if err := o.answer.add(ev.Data, o); err != nil || o.watch.cut == nil || !o.mayCut {
		return false
	}
	// The end is written later, for the events the client will have by
	// then; asked now only whether it waits for one more event.
	_, stop := o.answer.appendEnd(nil, o.ending())
	o.endPending = !stop
	return stop
}

// codedEnd appends the end of a cut coded stream, for the events read so
// far. An end that waited for one more event (deferredEnd) and did not get
// it is written without it.
func (o *answerObserver) codedEnd(out []byte) []byte {
	out, stop := o.answer.appendEnd(out, o.ending())
	if !stop {
		if d, ok := o.answer.(deferredEnd); ok {
			out = d.appendDeferredEnd(&sse.Event{}, out, o.ending())
		}
	}
	return out
}

// recordAnswer reads the event that completes a recorded answer and saves
// the record before the agent sees the end.
func (o *answerObserver) recordAnswer(ev *sse.Event, out []byte) []byte {
	out = o.end(out)
	if o.answer.add(ev.Data, o) == nil {
		o.record.save()
	}
	return append(out, ev.Raw...)
}

// update is told what each event added to the answer (updateSink): the
// watched text goes to the cut watch, choice 0's tool calls to the holder
// and the call dedup.
func (o *answerObserver) update(u answerUpdate) {
	if o.watch.cut != nil || u.choice < 0 || u.choice >= maxWatchedChoices {
		return
	}
	if o.watch.add(u) {
		return
	}
	if u.choice == 0 {
		if o.holding {
			o.holder.note(u) // what it notes is read only while holding
		}
		o.dedup.note(u, o.answer, &o.watch)
	}
}

// appendEnd appends the end of a cut stream in the answer's shape; stop
// false when the answer ends it after a further event (deferredEnd).
func (o *answerObserver) appendEnd(out []byte) ([]byte, bool) {
	out, stop := o.answer.appendEnd(out, o.ending())
	o.endPending = !stop
	return out, stop
}

// ending is what the end of a cut stream reports beside the answer.
func (o *answerObserver) ending() ending {
	return ending{
		cut:          o.watch.cut,
		offset:       o.watch.offset,
		bytes:        o.watch.bytes,
		finishReason: o.pipeline.cfg.Stream.FinishReason,
		usage:        o.plan.usage,
		model:        o.plan.model,
	}
}

// end releases what the observer still holds when the stream is over
// without a cut (the upstream finished, failed or went idle): the events
// tail = "trim" keeps back and the held tool-call events. Held events wait
// for what follows them; at the end nothing follows, and the client must
// get every byte the upstream sent (docs/streams.md: a healthy stream
// arrives whole).
func (o *answerObserver) end(out []byte) []byte {
	out = o.trimmer.release(out, 1<<62)
	return o.holder.release(out)
}

// body inspects a non-streamed answer: a degenerate text is cut at the
// offset where the repetition began, in the API's shape (wireAPI.cutBody).
func (o *answerObserver) body(status int, b []byte, decoded bool) []byte {
	if status != fasthttp.StatusOK || o.encoded && !decoded {
		return nil
	}
	if !o.cuts() && !o.record.active() {
		// Only the usage is read (policy mode off or shadow), which the
		// walk finds without the answer being validated first.
		o.bodyUsage = answerUsage(b)
		return nil
	}
	if !rawjson.Valid(b) {
		return nil
	}
	o.bodyUsage = answerUsage(b)
	var out []byte
	if o.cuts() {
		out = o.plan.api.cutBody(&o.watch, b, o.pipeline.cfg.Stream.FinishReason)
	}
	// The record holds the output as the agent got it.
	o.record.body(b, out)
	return out
}

// usage returns the token usage the upstream reported for the answer: from
// the body for a plain answer (read by body), else from the stream.
func (o *answerObserver) usage() observe.Usage {
	if o.bodyUsage != (observe.Usage{}) {
		return o.bodyUsage
	}
	u := o.answer.usage()
	return observe.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
}

// finish records a cut in the session, so the next request tells the model
// its answer degenerated, and returns o to the pool.
func (o *answerObserver) finish(cause error, info *observe.ResponseInfo) {
	w := &o.watch
	saved := 0
	if w.cut != nil && o.plan.maxTok > 0 {
		saved = max(0, int(o.plan.maxTok)-estimateTokens(w.bytes))
	}
	info.Session = o.plan.key
	info.Usage = o.usage()
	if info.Status == fasthttp.StatusOK {
		o.record.finish()
	}
	if w.cut != nil && !o.holder.replaced {
		info.Cut = policy.Cut{Category: w.cut.Category, Offset: w.offset, TokensSaved: saved, At: w.at}
		info.CutDelay = w.delay()
		if o.plan.key != "" {
			t := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), o.pipeline.storeTimeout)
			if err := o.pipeline.policy.RecordCut(ctx, o.plan.key, info.Cut); err != nil {
				o.pipeline.failOpen(nil, "store", err)
			}
			cancel()
			info.CutStoreDuration = time.Since(t)
		}
	}
	if errors.Is(cause, errCut) {
		// Closing the connection does not stop a resumable stream.
		o.plan.resume.stop()
	}
	if o.done != nil {
		ev := o.plan.event()
		ev.Status = info.Status
		ev.Cut, ev.CutOffset, ev.TokensSaved = w.cut, w.offset, saved
		o.done(&ev)
	}
	o.release()
}

var (
	_ responseObserver = (*answerObserver)(nil)
	_ codedObserver    = (*answerObserver)(nil)
	_ updateSink       = (*answerObserver)(nil)
)
