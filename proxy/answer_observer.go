package proxy

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// answerObserver watches the answer to one guarded request as it passes,
// and decides: its API's answer reads each event and returns what the
// event added (sse.Update); the observer feeds the text to the cut watch
// (cutWatch, below: degeneration, and the cut), and the tool calls to
// small parts, each owning its state:
//
//   - dedup (answer_dedup.go): duplicate tool calls in one answer;
//   - holder (answer_hold.go): stream.hold_tool_calls;
//   - trimmer (answer_trim.go): stream.tail = "trim";
//   - record (answer_record.go): the Responses history record.
//
// Once the answer is cut, the API's answer writes the end of the stream in
// its own shape (api_chat.go, api_responses.go, api_anthropic.go,
// api_ollama.go). Observers are pooled.
type answerObserver struct {
	answerState

	// The parts keep what they allocated from one answer to the next.
	watch   cutWatch
	dedup   callDedup
	holder  callHolder
	trimmer trimmer
}

// answerState is what an observer holds for one answer only: reset zeroes
// it in place.
type answerState struct {
	answer answer
	// endPending: the cut's end waits for one more event (answer.appendEnd).
	endPending bool
	encoded    bool // the answer is compressed: forward it uninspected
	// What the request asks of its answer, fixed when the observer
	// starts: mayCut (stream.cut is on and the request's policy mode is
	// enforce: shadow and off change nothing), holding (holdCalls), trimming
	// (stream.tail = "trim") and recording (record.active).
	mayCut, holding, trimming, recording bool

	pipeline  *pipeline
	plan      *plan
	done      func(*ChatEvent)
	status    int
	abandoned bool // a call panicked: not returned to the pool
	// counted: the answer's usage went to its session's budget
	// (countUsage), which happens once.
	counted bool

	record answerRecord

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
	// Zeroed in place: a composite literal that kept the parts would be
	// built whole on the stack first, the cut watch's arrivals with them.
	o.answerState = answerState{}
}

func (o *answerObserver) header(status int, h *fasthttp.ResponseHeader) {
	o.status = status
	setLoopHeaders(h, o.plan)
	// We asked for identity; an answer the upstream compresses anyway is
	// never parsed as it comes (docs/streams.md: compression): a stream in
	// a coding loopguard reads arrives here decoded (relayStream), a body
	// is decoded whole (body), and any other passes as sent.
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
		return o.appendPendingEnd(ev, out), true
	}
	if o.watch.cut != nil || len(ev.Data) == 0 || ev.Data[0] != '{' || !o.mayCut && !o.recording {
		return append(out, ev.Raw...), false
	}
	// Nothing reaches the client before event returns, so reading the
	// event before appending it holds nothing back; only a cut asks
	// whether the event is one the API reads first (readFirst, a pure
	// function of the data), which the cut then replaces: most events
	// never pay for that scan (docs/streams.md).
	err := o.read(ev.Data)
	if o.watch.cut == nil || !o.mayCut {
		return append(out, ev.Raw...), false
	}
	if rf := o.plan.api.readFirst; rf != nil && rf(ev.Data) {
		return o.appendEnd(out)
	}
	out = append(out, ev.Raw...)
	if err != nil {
		return out, false // an upstream error event or a chunk we cannot read: forward only
	}
	return o.appendEnd(out)
}

// read folds one event's data into the answer and acts on what it added
// (update); data the answer cannot read returns its error.
func (o *answerObserver) read(data []byte) error {
	ups, err := o.answer.add(data)
	for i := range ups {
		o.update(&ups[i])
	}
	return err
}

// recordAnswer reads the event that completes a recorded answer and saves
// the record before the agent sees the end.
func (o *answerObserver) recordAnswer(ev *sse.Event, out []byte) []byte {
	out = o.end(out)
	if o.read(ev.Data) == nil {
		o.record.save()
	}
	return append(out, ev.Raw...)
}

// update acts on what an event added to the answer: the watched text goes
// to the cut watch, choice 0's tool calls to the holder and the call
// dedup.
func (o *answerObserver) update(u *sse.Update) {
	if o.watch.cut != nil || u.Choice < 0 || u.Choice >= maxWatchedChoices {
		return
	}
	if o.watch.add(u) {
		return
	}
	if u.Choice == 0 {
		if o.holding {
			o.holder.note(u) // what it notes is read only while holding
		}
		o.dedup.note(u, o.answer, &o.watch)
	}
}

// appendEnd appends the end of a cut stream in the answer's shape; stop
// false when the answer ends it after one more event (endPending).
func (o *answerObserver) appendEnd(out []byte) ([]byte, bool) {
	out, stop := o.answer.appendEnd(out, o.ending(), nil)
	o.endPending = !stop
	return out, stop
}

// appendPendingEnd appends the end that waited for ev (endPending). Not
// inlined in event: the ending it builds would be in the frame of every
// event, under which the answer's reading runs (docs/streams.md).
//
//go:noinline
func (o *answerObserver) appendPendingEnd(ev *sse.Event, out []byte) []byte {
	out, _ = o.answer.appendEnd(out, o.ending(), ev)
	return out
}

// ending is what the end of a cut stream reports beside the answer. It is
// made on the heap, once a cut came, and passed by pointer: a value would
// be copied into the frames of the answer's appendEnd, and a field would
// grow every open stream's observer (docs/streams.md).
func (o *answerObserver) ending() *ending {
	return &ending{
		cut:          o.watch.cut,
		dropped:      o.trimmer.dropped,
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
	if !o.mayCut && !o.record.active() {
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
	if o.mayCut {
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

// countUsage adds the answer's usage to its session's budget when a budget
// applies to it ([policy] session_max_tokens and the like), once. It runs
// before the answer is reported (finish), and on a socket before the
// answer's last event reaches the client (socketTurn.answered): an agent
// sends its next turn as soon as it has an answer, and that turn must be
// decided against a count that holds this one.
func (o *answerObserver) countUsage() {
	if o.counted || !o.plan.decision.Budgeted {
		return
	}
	o.counted = true
	o.pipeline.recordUsage(o.plan.key, o.usage())
}

// finish counts the answer's usage toward its session's budget and records
// a cut in the session, so the next request tells the model its answer
// degenerated, before it reports the answer; it returns o to the pool.
func (o *answerObserver) finish(cause error, info *observe.ResponseInfo) {
	w := &o.watch
	saved := 0
	if w.cut != nil && o.plan.maxTok > 0 {
		saved = max(0, int(o.plan.maxTok)-estimateTokens(w.bytes))
	}
	info.Session = o.plan.key
	info.Usage = o.usage()
	o.countUsage()
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
				o.pipeline.failOpen(nil, observe.StageStore, err)
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

var _ responseObserver = (*answerObserver)(nil)

// maxWatchedChoices bounds the choices (n > 1) whose text is inspected.
const maxWatchedChoices = 4

// cutWatch decides when an answer degenerated: it feeds the text and
// reasoning of each watched choice to a degeneration detector after it was
// forwarded, and keeps the cut, whichever part of the observer found it,
// with when the first degenerate byte arrived.
type cutWatch struct {
	// cut is what ended the answer, nil while it goes on.
	cut *inspect.Detection
	// bytes is the text generated so far, all watched choices.
	bytes int64
	// text and reasoning are choice 0's content and reasoning bytes so far.
	text, reasoning int64
	// since is when the answer's first event arrived (monotonic
	// nanoseconds, see monoNow); arrivals count their time from it.
	since     int64
	nArrivals int // arrivals recorded, the latest at (nArrivals-1) % len(arrivals)
	// content and reason are the detectors of each watched choice's
	// text and reasoning, made with its first byte of each.
	content, reason [maxWatchedChoices]*inspect.Degeneration
	cfg             *inspect.StreamConfig
	// offset is where in the text the degeneration began.
	offset int64
	at     time.Time
	// slot is 1 when the cut came from choice 0's content, 2 from its
	// reasoning, 0 from elsewhere.
	slot int

	// arrivals remembers when recent events came and how far choice 0's
	// content and reasoning had got, to time a cut from the arrival of the
	// first degenerate byte. A cut whose first degenerate byte came more
	// events back than it holds is timed from the oldest it holds. Every
	// inspected open stream holds it, 12 bytes an event.
	arrivals [120]arrival
}

type arrival struct {
	at                 uint32 // microseconds after since
	content, reasoning uint32 // text offsets, at most math.MaxUint32
}

// add feeds what one event added to a watched choice and reports whether
// it degenerated.
func (w *cutWatch) add(u *sse.Update) bool {
	w.bytes += int64(len(u.Text) + len(u.Reasoning))
	if u.Choice == 0 {
		w.text += int64(len(u.Text))
		w.reasoning += int64(len(u.Reasoning))
		w.arrive()
	}
	if len(u.Text) > 0 && w.watch(&w.content[u.Choice], u.Text) {
		if u.Choice == 0 {
			w.slot = 1
		}
		return true
	}
	if len(u.Reasoning) > 0 && w.watch(&w.reason[u.Choice], u.Reasoning) {
		if u.Choice == 0 {
			w.slot = 2
		}
		return true
	}
	return false
}

// arrive notes the time and choice 0's text offsets after an event.
func (w *cutWatch) arrive() {
	now := monoNow()
	if w.nArrivals == 0 {
		w.since = now
	}
	at := (now - w.since) / 1e3
	if at > math.MaxUint32 {
		// 71 minutes into the answer: forget the older arrivals rather
		// than count further (the oldest remembered bounds a delay).
		w.since, at, w.nArrivals = now, 0, 0
	}
	w.arrivals[w.nArrivals%len(w.arrivals)] = arrival{at: uint32(at), content: offset32(w.text), reasoning: offset32(w.reasoning)}
	w.nArrivals++
}

// monoBase is the origin of monoNow.
var monoBase = time.Now()

// monoNow is the monotonic clock in nanoseconds since monoBase. An event
// reads the clock once; time.Now reads the wall clock as well, twice the
// cost, and the arrivals only need the time between events (docs/streams.md).
func monoNow() int64 { return int64(time.Since(monoBase)) }

// offset32 is a text offset as an arrival keeps it.
func offset32(n int64) uint32 { return uint32(min(n, math.MaxUint32)) }

// watch feeds text to a (lazily created) detector and records a cut.
func (w *cutWatch) watch(slot **inspect.Degeneration, text []byte) bool {
	if *slot == nil {
		*slot = w.newDetector()
	}
	if !(*slot).Write(text) {
		return false
	}
	w.cutBy(*slot)
	return true
}

// newDetector makes a detector of w's configuration, and cutBy records
// the cut of a detector that fired. Neither is inlined in watch: what they
// copy (the configuration, the detection) would be in the frame of every
// event's watch, under which the detector's deepest calls run
// (docs/streams.md).
//
//go:noinline
func (w *cutWatch) newDetector() *inspect.Degeneration { return inspect.NewDegeneration(*w.cfg) }

//go:noinline
func (w *cutWatch) cutBy(d *inspect.Degeneration) {
	det := new(inspect.Detection) // kept: made where it is kept, not copied there
	*det = d.Detection()
	w.cut, w.offset, w.at = det, d.Offset(), time.Now()
}

// textDetector returns the (lazily created) detector of choice's text, for
// a non-streamed answer.
func (w *cutWatch) textDetector(choice int) *inspect.Degeneration {
	if w.content[choice] == nil {
		w.content[choice] = w.newDetector()
	}
	return w.content[choice]
}

// cutAt records the cut det, which found the degeneration beginning at
// offset in the text.
func (w *cutWatch) cutAt(det inspect.Detection, offset int64) {
	w.cut, w.offset, w.at = &det, offset, time.Now()
}

// delay is the time from the arrival of the first degenerate byte to the
// cut, or 0 when the cut was not in choice 0's text. When that byte is
// older than the remembered events, the oldest one bounds it from below.
func (w *cutWatch) delay() time.Duration {
	if w.slot == 0 || w.nArrivals == 0 {
		return 0
	}
	n := min(w.nArrivals, len(w.arrivals))
	first := w.arrivals[(w.nArrivals-n)%len(w.arrivals)].at
	for i := w.nArrivals - n; i < w.nArrivals; i++ {
		a := w.arrivals[i%len(w.arrivals)]
		end := a.content
		if w.slot == 2 {
			end = a.reasoning
		}
		if int64(end) > w.offset {
			first = a.at
			break
		}
	}
	return w.at.Sub(monoBase) - time.Duration(w.since+int64(first)*1e3)
}

// reset readies w for another answer, keeping its detectors.
func (w *cutWatch) reset() {
	for i := range w.content {
		if d := w.content[i]; d != nil {
			d.Reset()
		}
		if d := w.reason[i]; d != nil {
			d.Reset()
		}
	}
	// Zeroed in place: a composite literal that kept the detectors would
	// be built on the stack first, arrivals and all, and the stack of the
	// relay that releases the observer would grow for it (docs/streams.md).
	content, reason := w.content, w.reason
	*w = cutWatch{}
	w.content, w.reason = content, reason
}
