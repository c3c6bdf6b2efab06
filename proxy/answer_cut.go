package proxy

import (
	"math"
	"time"

	"github.com/loopguard/loopguard/inspect"
)

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
func (w *cutWatch) add(u answerUpdate) bool {
	w.bytes += int64(len(u.text) + len(u.reasoning))
	if u.choice == 0 {
		w.text += int64(len(u.text))
		w.reasoning += int64(len(u.reasoning))
		w.arrive()
	}
	if len(u.text) > 0 && w.watch(&w.content[u.choice], u.text) {
		if u.choice == 0 {
			w.slot = 1
		}
		return true
	}
	if len(u.reasoning) > 0 && w.watch(&w.reason[u.choice], u.reasoning) {
		if u.choice == 0 {
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
		*slot = inspect.NewDegeneration(*w.cfg)
	}
	if !(*slot).Write(text) {
		return false
	}
	w.cutAt((*slot).Detection(), (*slot).Offset())
	return true
}

// textDetector returns the (lazily created) detector of choice's text, for
// a non-streamed answer.
func (w *cutWatch) textDetector(choice int) *inspect.Degeneration {
	if w.content[choice] == nil {
		w.content[choice] = inspect.NewDegeneration(*w.cfg)
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
	*w = cutWatch{content: w.content, reason: w.reason}
}
