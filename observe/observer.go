package observe

import (
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Options configures an Observer. The zero Options works.
type Options struct {
	// MaxSessions bounds the sessions the recorder keeps; the least recently
	// seen is forgotten beyond it. Default 10000.
	MaxSessions int
	// Timeline is how many entries each session keeps. Default 32.
	Timeline int
	// Feed is how many recent entries the live feed keeps for dashboards
	// that reconnect. Default 1024.
	Feed int
	// Buckets is how many one-minute stats buckets are kept. Default 60.
	Buckets int
	// LogContent adds the pattern's brief (which quotes the repeated call's
	// arguments or text) to log events. Default false: arguments can hold
	// secrets, so events carry the tool name, count and fingerprints only.
	LogContent bool
	// Replica names this replica in the timeline entries it records, so
	// that a view shared by several (Cluster) tells who saw what.
	Replica string
	// Now returns the current time; nil means time.Now. For tests.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.Timeline <= 0 {
		o.Timeline = DefaultTimeline
	}
	if o.Feed <= 0 {
		o.Feed = DefaultFeed
	}
	if o.Buckets <= 0 {
		o.Buckets = DefaultBuckets
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Observer is the proxy's one entry point into observability: it counts
// metrics, records sessions and logs detections and interventions. A nil
// *Observer does nothing, so the proxy may run without one.
type Observer struct {
	metrics    *Metrics
	rec        *Recorder
	log        zerolog.Logger
	logContent bool
	now        func() time.Time
}

// New creates an Observer whose metrics are registered with reg (nil: not
// registered) and whose events go to log.
func New(reg prometheus.Registerer, log zerolog.Logger, opts Options) (*Observer, error) {
	opts.defaults()
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Observer{metrics: m, rec: NewRecorder(opts, m), log: log, logContent: opts.LogContent, now: opts.Now}, nil
}

// WatchSessionCache makes the inspect cache metrics report stats, read at
// each scrape (a SessionCache's Stats).
func (o *Observer) WatchSessionCache(stats func() inspect.CacheStats) {
	if o != nil {
		o.metrics.inspectCache.Store(&stats)
	}
}

// Recorder returns the session record, for the admin API.
func (o *Observer) Recorder() *Recorder { return o.rec }

// RequestInfo is what the proxy knows about a chat request once policy has
// decided. Strings must not alias buffers the proxy reuses: the recorder
// keeps them.
type RequestInfo struct {
	// Session is the session key (policy.Identity.Key).
	Session string
	// Model is the request's model field.
	Model string
	// API is the request's wire API.
	API inspect.API
	// Steps is the number of assistant turns in the history.
	Steps int
	// Transport is how the turn came: "" for an HTTP request,
	// TransportWebSocket for a message on a Responses WebSocket.
	Transport string
	// Tool and Fingerprint name the history's last tool call
	// (inspect.Call.Name and Fingerprint); never its arguments.
	Tool        string
	Fingerprint uint64
	// Decision is policy's decision; nil when none was made (mode off, or
	// the pipeline failed open before deciding). Observer only reads it.
	Decision *policy.Decision
	// DetectDuration is the time spent parsing the history and running the
	// detectors; StoreDuration the time of policy.Decide (store load and
	// update). Zero: not measured.
	DetectDuration time.Duration
	StoreDuration  time.Duration
}

// ResponseInfo is what the proxy knows when a response is over: proxied,
// passed through or answered by loopguard itself.
type ResponseInfo struct {
	// Session is the chat request's session key; "" for pass-through.
	Session string
	// Path is the request path; it is reduced to a closed label set.
	Path string
	// Status is the HTTP status the client got.
	Status int
	// Streamed is true for an SSE relay that StreamOpened counted.
	Streamed bool
	// UpstreamLatency is the time to the upstream's response headers (zero
	// when the upstream was not called), TTFB the time to the first body
	// bytes sent to the client, Duration the whole exchange.
	UpstreamLatency time.Duration
	TTFB            time.Duration
	Duration        time.Duration
	// Events counts SSE events forwarded; Bytes the body bytes written.
	Events int
	Bytes  int64
	// Cut is the answer's cut; Cut.Category is "" when it was not cut.
	Cut policy.Cut
	// CutStoreDuration is the time policy.RecordCut took.
	CutStoreDuration time.Duration
	// CutDelay is the time from the arrival of the first degenerate byte
	// (Cut.Offset) to the cut; zero when unknown.
	CutDelay time.Duration
	// Usage is the token usage the upstream reported for the answer; zero
	// when it reported none.
	Usage Usage
	// Transport is how the turn came: "" for an HTTP request, "websocket"
	// for a turn on a Responses WebSocket.
	Transport string
}

// Usage is the token usage an upstream reported: prompt_tokens (chat) or
// input_tokens (Responses, Anthropic), and completion_tokens or
// output_tokens.
type Usage struct {
	Input  int `json:"input"`
	Output int `json:"output"`
}

// Request records a chat request after policy's decision: detections,
// interventions, recovery outcomes, timings, and one log event per
// detection or intervention.
func (o *Observer) Request(info RequestInfo) {
	if o == nil || info.Session == "" {
		return
	}
	now := o.now()
	m := o.metrics
	m.detect(info.DetectDuration)
	m.store(storeDecide, info.StoreDuration)
	if d := info.Decision; d != nil {
		cat := categoryIndex(d.Verdict.Category)
		if d.Budget != nil && !d.Verdict.Loop {
			cat = categoryIndex(policy.BudgetCategory)
		}
		act := actionIndex(d.Action)
		if d.Verdict.Loop {
			m.detection(cat, act)
		}
		if isIntervention(d.Action) {
			m.intervention(cat, act, levelIndex(d.Level))
			if d.Action == policy.Terminate {
				m.termination(cat)
			}
		}
		if d.Incident {
			m.incident(cat)
		}
		if d.Verdict.Loop || isIntervention(d.Action) {
			o.logDecision(&info, d)
		}
		if b := d.Budget; b != nil {
			o.log.Info().Str("session", info.Session).Str("budget", b.Kind).Int64("used", b.Used).
				Int64("limit", b.Limit).Bool("exceeded", b.Exceeded).Str("action", string(d.Action)).Msg("session budget")
		}
	}
	o.rec.request(&info, now)
}

// Response records the end of a response: status and latencies, SSE events,
// and the cut when the answer was cut short.
func (o *Observer) Response(info ResponseInfo) {
	if o == nil {
		return
	}
	m := o.metrics
	m.response(transportIndex(info.Transport), pathIndex(info.Path), info.Status, info.UpstreamLatency, info.TTFB, info.Duration, info.Events)
	if info.Streamed {
		m.streamClosed()
	}
	if info.Session != "" {
		o.rec.answer(&info)
	}
	if info.Cut.Category == "" {
		return
	}
	m.cut(categoryIndex(info.Cut.Category), info.Cut.TokensSaved, info.CutDelay)
	m.store(storeCut, info.CutStoreDuration)
	o.rec.response(&info, o.now())
	o.log.Info().Str("session", info.Session).Str("category", string(info.Cut.Category)).
		Int64("offset", info.Cut.Offset).Int("tokens_saved", info.Cut.TokensSaved).
		Dur("cut_delay", info.CutDelay).Msg("degenerate answer cut")
}

// JudgeInfo is one check of the optional judge, as the proxy reports it.
type JudgeInfo struct {
	Session string
	// Step is the index of the last step the judge read.
	Step int
	// Outcome is the check's outcome (judge.Outcome's labels).
	Outcome    string
	Stuck      bool
	Confidence float64
	// What is what the judge saw repeating: kept in the timeline as a
	// brief, logged only with LogContent.
	What    string
	Latency time.Duration // 0: no call was made
	Tokens  int
}

// Judge counts a check of the optional judge and records it in the
// session's timeline. Checks skipped before any call (queue full, over
// budget) are counted but stay out of the timeline: one per turn would
// crowd out the requests.
func (o *Observer) Judge(info JudgeInfo) {
	if o == nil {
		return
	}
	m := o.metrics
	m.judgeChecks.WithLabelValues(info.Outcome).Inc()
	if info.Latency > 0 {
		m.judgeLatency.Observe(info.Latency.Seconds())
		m.judgeTokens.Add(float64(info.Tokens))
	}
	if info.Session == "" || info.Latency == 0 {
		return
	}
	o.rec.judge(&info, o.now())
	if info.Stuck {
		ev := o.log.Info().Str("session", info.Session).Float64("confidence", info.Confidence)
		if o.logContent {
			ev = ev.Str("what", info.What)
		}
		ev.Msg("judge: agent stuck")
	}
}

// StreamOpened counts an SSE relay starting; the Response with Streamed
// set ends it.
func (o *Observer) StreamOpened() {
	if o != nil {
		o.metrics.StreamOpened()
	}
}

// FailOpen counts a request, or the rest of an answer, passed through
// unchanged because stage failed (a stage not among the Stage constants
// counts as other).
func (o *Observer) FailOpen(stage Stage) {
	if o != nil {
		o.metrics.failOpenAt(stageIndex(stage))
	}
}

// logDecision writes one event for a detection or an intervention. Without
// LogContent it names the pattern by tool, count and fingerprints only.
func (o *Observer) logDecision(info *RequestInfo, d *policy.Decision) {
	ev := o.log.Info()
	if !ev.Enabled() {
		return
	}
	// Fields that repeat the default are left out: this event is written on
	// every looping request, and each field costs tens of nanoseconds.
	ev = ev.Str("session", info.Session).Str("category", string(d.Verdict.Category)).
		Float64("confidence", d.Verdict.Confidence).Str("action", string(d.Action)).Int("level", d.Level).
		Str("pattern_key", d.Pattern)
	if d.Would != d.Action {
		ev = ev.Str("would", string(d.Would))
	}
	if d.Reapplied {
		ev = ev.Bool("reapplied", true)
	}
	if info.Model != "" {
		ev = ev.Str("model", info.Model)
	}
	if info.Fingerprint != 0 {
		ev = ev.Hex("fingerprint", fingerprintBytes(info.Fingerprint))
	}
	if len(d.Verdict.Detections) > 0 {
		e := &d.Verdict.Detections[0].Evidence
		ev = ev.Str("tool", e.Tool).Int("count", e.Count)
	}
	if o.logContent {
		ev = ev.Str("pattern", d.Brief)
	}
	if len(d.Recovered) > 0 {
		ev = ev.Int("recovered", len(d.Recovered))
	}
	msg := "loop detected"
	if isIntervention(d.Action) {
		msg = "loop intervention"
	}
	ev.Msg(msg)
}

func fingerprintBytes(f uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(f >> (56 - 8*i))
	}
	return b
}
