package observe

import (
	"sync/atomic"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds loopguard's Prometheus collectors. Create it once with
// NewMetrics; its methods are safe for concurrent use and, once a label
// combination has been seen, allocation-free: every child a request can
// touch is resolved once and cached in a fixed array indexed by the closed
// label sets of labels.go.
type Metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	upstream       *prometheus.HistogramVec
	ttfb           *prometheus.HistogramVec
	activeStreams  prometheus.Gauge
	events         prometheus.Counter
	detections     *prometheus.CounterVec
	interventions  *prometheus.CounterVec
	cuts           *prometheus.CounterVec
	cutDelay       prometheus.Histogram
	tokensSaved    *prometheus.CounterVec
	terminations   *prometheus.CounterVec
	incidents      *prometheus.CounterVec
	failOpen       *prometheus.CounterVec
	storeLatency   *prometheus.HistogramVec
	detectDuration prometheus.Histogram
	recoveries     *prometheus.CounterVec
	// The optional judge's work, off any request's path.
	judgeChecks  *prometheus.CounterVec
	judgeLatency prometheus.Histogram
	judgeTokens  prometheus.Counter
	// inspectCache reads the inspect session cache's counters at scrape
	// time (see Observer.WatchSessionCache); its collectors report 0 until
	// one is set.
	inspectCache atomic.Pointer[func() inspect.CacheStats]
	cacheHits    prometheus.CounterFunc
	cacheMisses  prometheus.CounterFunc
	cacheBytes   prometheus.GaugeFunc

	// Cached children. status is 0..599; anything else shares slot 0.
	byStatus       [len(transportLabels)][len(pathLabels)][600]atomic.Pointer[statusChildren]
	byPath         [len(transportLabels)][len(pathLabels)]pathChildren
	detectionsC    [nCat][nAct]atomic.Pointer[counterBox]
	interventionsC [nCat][nAct][nLevel]atomic.Pointer[counterBox]
	cutsC          [nCat]atomic.Pointer[counterBox]
	tokensC        [nCat]atomic.Pointer[counterBox]
	terminationsC  [nCat]atomic.Pointer[counterBox]
	failOpenC      [nStage]prometheus.Counter
	storeC         [2]prometheus.Observer
	recoveriesC    [nCat][nLevel][2]atomic.Pointer[counterBox]
}

type statusChildren struct {
	requests prometheus.Counter
	upstream prometheus.Observer
}

type pathChildren struct {
	duration prometheus.Observer
	ttfb     prometheus.Observer
}

type counterBox struct{ c prometheus.Counter }

// Store operations timed by loopguard_store_latency_seconds.
const (
	storeDecide = iota // load + update around a decision
	storeCut           // recording a stream cut
)

var storeOps = [...]string{"decide", "record_cut"}

// llmBuckets span an LLM server's answers: from a cached health check to a
// long reasoning stream.
var llmBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// fastBuckets span in-process work: detection over a long history, a local
// or redis store call (10us .. ~1.3s).
var fastBuckets = prometheus.ExponentialBuckets(10e-6, 2, 18)

// NewMetrics creates loopguard's collectors and registers them with reg.
// A nil reg creates unregistered collectors (for tests and benchmarks).
// It fails when reg already holds collectors of the same names.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_requests_total",
			Help: "Requests answered, by endpoint, HTTP status and transport (http, or websocket for a turn on a Responses WebSocket; loopguard's own answers included).",
		}, []string{"path", "status", "transport"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "loopguard_request_duration_seconds", Buckets: llmBuckets,
			Help: "Time from receiving a request to the end of its answer, streams included, by endpoint and transport.",
		}, []string{"path", "transport"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "loopguard_upstream_latency_seconds", Buckets: llmBuckets,
			Help: "Time until the upstream's response headers arrived, by endpoint and status.",
		}, []string{"path", "status"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "loopguard_time_to_first_byte_seconds", Buckets: llmBuckets,
			Help: "Time until the first body bytes (the first SSE event of a stream) reached the client.",
		}, []string{"path"}),
		activeStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loopguard_active_streams",
			Help: "SSE responses being relayed now.",
		}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loopguard_sse_events_forwarded_total",
			Help: "SSE events forwarded to clients.",
		}),
		detections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_detections_total",
			Help: "Requests whose history showed a loop, by category and the action taken (shadow in shadow mode).",
		}, []string{"category", "action"}),
		interventions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_interventions_total",
			Help: "Interventions applied, by category, action and escalation level (0-based ladder index).",
		}, []string{"category", "action", "level"}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_streams_cut_total",
			Help: "Degenerate answers cut short, by category.",
		}, []string{"category"}),
		cutDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "loopguard_cut_delay_seconds",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
			Help:    "Time from the arrival of an answer's first degenerate byte (where the repetition began) to the cut.",
		}),
		tokensSaved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_tokens_saved_total",
			Help: "Estimated completion tokens not generated because an answer was cut (max_tokens minus tokens sent).",
		}, []string{"category"}),
		terminations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_terminations_total",
			Help: "Requests answered LOOP_DETECTED without calling the upstream, by category.",
		}, []string{"category"}),
		incidents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_global_incidents_total",
			Help: "Cross-session incidents: one loop pattern seen in global_sessions sessions within global_window (redis store), by category.",
		}, []string{"category"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_fail_open_total",
			Help: "Requests passed through unchanged because a stage failed, by stage.",
		}, []string{"stage"}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "loopguard_store_latency_seconds", Buckets: fastBuckets,
			Help: "Session store time per operation: decide (load and update) or record_cut.",
		}, []string{"op"}),
		detectDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "loopguard_detection_duration_seconds", Buckets: fastBuckets,
			Help: "Time to parse a chat request's history and run the detectors.",
		}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_recoveries_total",
			Help: "What sessions did after an intervention: recovered (the pattern stopped and a new step came) or looped_again, by category and level.",
		}, []string{"category", "level", "outcome"}),
		judgeChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loopguard_judge_checks_total",
			Help: "Checks of the optional judge by outcome: stuck, not_stuck (verdicts), failed, timeout, unparseable (calls that changed nothing), queue_full, over_budget (skipped, no call).",
		}, []string{"outcome"}),
		judgeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "loopguard_judge_latency_seconds", Buckets: llmBuckets,
			Help: "Time of each call to the judge, answered or not.",
		}),
		judgeTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loopguard_judge_tokens_total",
			Help: "Tokens the judge's calls used, as its endpoint reported them (estimated where it did not).",
		}),
	}
	m.cacheHits = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "loopguard_inspect_cache_hits_total",
		Help: "Requests whose history extended their session's cached one: only the new messages were parsed.",
	}, func() float64 { return float64(m.sessionCache().Hits) })
	m.cacheMisses = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "loopguard_inspect_cache_misses_total",
		Help: "Requests of a session parsed in full: no cached history, or one the request does not extend (edited, compacted, another replica's).",
	}, func() float64 { return float64(m.sessionCache().Misses) })
	m.cacheBytes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "loopguard_inspect_cache_bytes",
		Help: "Memory the inspect session cache holds (estimated), within detect.session_cache_mb.",
	}, func() float64 { return float64(m.sessionCache().Bytes) })
	for t := range m.byPath {
		for i := range m.byPath[t] {
			m.byPath[t][i] = pathChildren{
				duration: m.duration.WithLabelValues(pathLabels[i], transportLabels[t]),
				ttfb:     m.ttfb.WithLabelValues(pathLabels[i]),
			}
		}
	}
	for i := range m.failOpenC {
		m.failOpenC[i] = m.failOpen.WithLabelValues(string(stages[i]))
	}
	for i := range m.storeC {
		m.storeC[i] = m.storeLatency.WithLabelValues(storeOps[i])
	}
	if reg != nil {
		for _, c := range m.collectors() {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// sessionCache returns the watched session cache's counters, zero when none.
func (m *Metrics) sessionCache() inspect.CacheStats {
	if f := m.inspectCache.Load(); f != nil {
		return (*f)()
	}
	return inspect.CacheStats{}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.requests, m.duration, m.upstream, m.ttfb, m.activeStreams, m.events,
		m.detections, m.interventions, m.cuts, m.cutDelay, m.tokensSaved, m.terminations, m.incidents,
		m.failOpen, m.storeLatency, m.detectDuration, m.recoveries,
		m.judgeChecks, m.judgeLatency, m.judgeTokens,
		m.cacheHits, m.cacheMisses, m.cacheBytes,
	}
}

// put stores c in slot unless a racing first use stored one already, and
// returns the counter the slot holds. Callers Load the slot first: only the
// first use of a label combination reaches put, so the label slice built
// for WithLabelValues is never allocated on the hot path.
func put(slot *atomic.Pointer[counterBox], c prometheus.Counter) prometheus.Counter {
	b := &counterBox{c: c}
	if !slot.CompareAndSwap(nil, b) {
		b = slot.Load()
	}
	return b.c
}

// response counts one finished response: status, latencies, events.
func (m *Metrics) response(transport, path, status int, upstream, ttfb, total time.Duration, events int) {
	if status < 0 || status >= 600 {
		status = 0
	}
	slot := &m.byStatus[transport][path][status]
	sc := slot.Load()
	if sc == nil {
		sc = m.newStatus(transport, path, status)
	}
	sc.requests.Inc()
	if upstream > 0 {
		sc.upstream.Observe(upstream.Seconds())
	}
	pc := &m.byPath[transport][path]
	pc.duration.Observe(total.Seconds())
	if ttfb > 0 {
		pc.ttfb.Observe(ttfb.Seconds())
	}
	if events > 0 {
		m.events.Add(float64(events))
	}
}

func (m *Metrics) newStatus(transport, path, status int) *statusChildren {
	code := "other"
	if status >= 100 {
		code = itoa3(status)
	}
	sc := &statusChildren{
		requests: m.requests.WithLabelValues(pathLabels[path], code, transportLabels[transport]),
		upstream: m.upstream.WithLabelValues(pathLabels[path], code),
	}
	slot := &m.byStatus[transport][path][status]
	if !slot.CompareAndSwap(nil, sc) {
		sc = slot.Load()
	}
	return sc
}

func itoa3(n int) string {
	return string([]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)})
}

func (m *Metrics) detection(cat, act int) {
	slot := &m.detectionsC[cat][act]
	if b := slot.Load(); b != nil {
		b.c.Inc()
		return
	}
	put(slot, m.detections.WithLabelValues(string(categories[cat]), string(actions[act]))).Inc()
}

func (m *Metrics) intervention(cat, act, level int) {
	slot := &m.interventionsC[cat][act][levelSlot(level)]
	if b := slot.Load(); b != nil {
		b.c.Inc()
		return
	}
	put(slot, m.interventions.WithLabelValues(string(categories[cat]), string(actions[act]), levelLabels[levelSlot(level)])).Inc()
}

func (m *Metrics) termination(cat int) {
	slot := &m.terminationsC[cat]
	if b := slot.Load(); b != nil {
		b.c.Inc()
		return
	}
	put(slot, m.terminations.WithLabelValues(string(categories[cat]))).Inc()
}

// incident counts a cross-session incident; rare, so the label lookup is
// not cached.
func (m *Metrics) incident(cat int) {
	m.incidents.WithLabelValues(string(categories[cat])).Inc()
}

func (m *Metrics) cut(cat int, tokensSaved int, delay time.Duration) {
	if delay > 0 {
		m.cutDelay.Observe(delay.Seconds())
	}
	slot := &m.cutsC[cat]
	if b := slot.Load(); b != nil {
		b.c.Inc()
	} else {
		put(slot, m.cuts.WithLabelValues(string(categories[cat]))).Inc()
	}
	if tokensSaved <= 0 {
		return
	}
	slot = &m.tokensC[cat]
	if b := slot.Load(); b != nil {
		b.c.Add(float64(tokensSaved))
		return
	}
	put(slot, m.tokensSaved.WithLabelValues(string(categories[cat]))).Add(float64(tokensSaved))
}

func (m *Metrics) recovery(cat, level int, recovered bool) {
	o, name := 1, outcomeLoopedAgain
	if recovered {
		o, name = 0, outcomeRecovered
	}
	slot := &m.recoveriesC[cat][levelSlot(level)][o]
	if b := slot.Load(); b != nil {
		b.c.Inc()
		return
	}
	put(slot, m.recoveries.WithLabelValues(string(categories[cat]), levelLabels[levelSlot(level)], name)).Inc()
}

func (m *Metrics) failOpenAt(stage int) { m.failOpenC[stage].Inc() }

func (m *Metrics) store(op int, d time.Duration) {
	if d > 0 {
		m.storeC[op].Observe(d.Seconds())
	}
}

func (m *Metrics) detect(d time.Duration) {
	if d > 0 {
		m.detectDuration.Observe(d.Seconds())
	}
}

// StreamOpened counts an SSE response that starts being relayed; the
// Response that ends it (Streamed true) counts it closed.
func (m *Metrics) StreamOpened() { m.activeStreams.Inc() }

func (m *Metrics) streamClosed() { m.activeStreams.Dec() }
