package observe

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// clock is a settable time source.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestObserver(t testing.TB, opts Options) (*Observer, *prometheus.Registry, *bytes.Buffer, *clock) {
	t.Helper()
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	c := &clock{t: time.Date(2025, 10, 1, 12, 0, 30, 0, time.UTC)}
	if opts.Now == nil {
		opts.Now = c.now
	}
	o, err := New(reg, zerolog.New(&logs), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return o, reg, &logs, c
}

// metricValue returns the value of the counter, gauge or histogram count of
// name whose labels include want, summed over matching series.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			sum += value(m)
		}
	}
	return sum
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// loopDecision builds the decision policy makes on a looping request.
func loopDecision(cat inspect.Category, action policy.Action, level int, pattern string) *policy.Decision {
	would := action
	mode := policy.ModeEnforce
	if action == policy.Shadow {
		would, mode = policy.Warn, policy.ModeShadow
	}
	return &policy.Decision{
		Mode: mode, Action: action, Would: would, Level: level, Pattern: pattern,
		Brief: "bash(cat /etc/secret-token) x3",
		Verdict: inspect.Verdict{Loop: true, Category: cat, Confidence: 0.93, PatternKey: pattern,
			Detections: []inspect.Detection{{Category: cat, Score: 0.93, Evidence: inspect.Evidence{
				Element: "bash(cat /etc/secret-token)", Tool: "bash", Args: `{"command":"cat /etc/secret-token"}`, Count: 3, Threshold: 3, NoProgress: true}}}},
	}
}

func TestPathLabel(t *testing.T) {
	tests := []struct{ give, want string }{
		{"/v1/chat/completions", "chat_completions"},
		{"/openai/v1/chat/completions", "chat_completions"},
		{"/v1/completions", "completions"},
		{"/v1/embeddings", "embeddings"},
		{"/v1/models", "models"},
		{"/v1/responses", "responses"},
		{"/v1/messages", "messages"},
		{"/api/chat", "ollama_chat"},
		{"/ollama/api/generate", "ollama_generate"},
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent", "generate_content"},
		{"/v1internal:streamGenerateContent", "code_assist"},
		{"/v1beta/models", "models"},
		{"/v1/models/gpt-4o", "other"},
		{"/anything/the/client/sends", "other"},
		{"", "other"},
	}
	for _, tt := range tests {
		if got := PathLabel(tt.give); got != tt.want {
			t.Errorf("PathLabel(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

func TestObserverMetrics(t *testing.T) {
	type sample struct {
		name   string
		labels map[string]string
		want   float64
	}
	tests := []struct {
		name      string
		requests  []RequestInfo
		responses []ResponseInfo
		streams   int
		failOpen  []Stage
		cache     inspect.CacheStats
		want      []sample
	}{
		{
			name: "plain requests by path and status",
			responses: []ResponseInfo{
				{Path: "/v1/chat/completions", Status: 200, UpstreamLatency: 20 * time.Millisecond, TTFB: 30 * time.Millisecond, Duration: time.Second},
				{Path: "/v1/chat/completions", Status: 200, Duration: time.Second},
				{Path: "/v1/models", Status: 502, Duration: time.Millisecond},
				{Path: "/weird", Status: 999},
			},
			want: []sample{
				{"loopguard_requests_total", map[string]string{"path": "chat_completions", "status": "200"}, 2},
				{"loopguard_requests_total", map[string]string{"path": "models", "status": "502"}, 1},
				{"loopguard_requests_total", map[string]string{"path": "other", "status": "other"}, 1},
				{"loopguard_upstream_latency_seconds", map[string]string{"path": "chat_completions", "status": "200"}, 1},
				{"loopguard_time_to_first_byte_seconds", map[string]string{"path": "chat_completions"}, 1},
				{"loopguard_request_duration_seconds", map[string]string{"path": "chat_completions"}, 2},
			},
		},
		{
			name: "requests by transport",
			responses: []ResponseInfo{
				{Path: "/v1/responses", Status: 200, Duration: time.Second},
				{Path: "/v1/responses", Status: 200, Duration: time.Second, Transport: TransportWebSocket},
				{Path: "/v1/responses", Status: 200, Duration: time.Second, Transport: TransportWebSocket},
			},
			want: []sample{
				{"loopguard_requests_total", map[string]string{"path": "responses", "status": "200", "transport": "http"}, 1},
				{"loopguard_requests_total", map[string]string{"path": "responses", "status": "200", "transport": "websocket"}, 2},
				{"loopguard_request_duration_seconds", map[string]string{"path": "responses", "transport": "websocket"}, 2},
			},
		},
		{
			name:      "streams, events and a cut",
			streams:   2,
			responses: []ResponseInfo{{Session: "s1", Path: "/v1/chat/completions", Status: 200, Streamed: true, Events: 7, Cut: policy.Cut{Category: inspect.TokenDegeneration, Offset: 512, TokensSaved: 900}, CutStoreDuration: time.Millisecond}},
			want: []sample{
				{"loopguard_active_streams", nil, 1},
				{"loopguard_sse_events_forwarded_total", nil, 7},
				{"loopguard_streams_cut_total", map[string]string{"category": "token_degeneration"}, 1},
				{"loopguard_tokens_saved_total", map[string]string{"category": "token_degeneration"}, 900},
				{"loopguard_store_latency_seconds", map[string]string{"op": "record_cut"}, 1},
			},
		},
		{
			name: "detections, interventions, terminations",
			requests: []RequestInfo{
				{Session: "s1", Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p"), DetectDuration: time.Millisecond, StoreDuration: time.Millisecond},
				{Session: "s1", Decision: loopDecision(inspect.ToolRepetition, policy.Constrain, 1, "p")},
				{Session: "s1", Decision: loopDecision(inspect.ToolRepetition, policy.Terminate, 2, "p")},
				{Session: "s2", Decision: loopDecision(inspect.ErrorCycle, policy.Shadow, 0, "q")},
				{Session: "s3", Decision: &policy.Decision{Action: policy.None, Level: -1}},
			},
			want: []sample{
				{"loopguard_detections_total", map[string]string{"category": "tool_repetition"}, 3},
				{"loopguard_detections_total", map[string]string{"category": "error_cycle", "action": "shadow"}, 1},
				{"loopguard_interventions_total", map[string]string{"action": "warn", "level": "0"}, 1},
				{"loopguard_interventions_total", map[string]string{"action": "constrain", "level": "1"}, 1},
				{"loopguard_interventions_total", map[string]string{"category": "error_cycle"}, 0},
				{"loopguard_terminations_total", map[string]string{"category": "tool_repetition"}, 1},
				{"loopguard_recoveries_total", map[string]string{"outcome": "looped_again"}, 2},
				{"loopguard_detection_duration_seconds", nil, 1},
				{"loopguard_store_latency_seconds", map[string]string{"op": "decide"}, 1},
			},
		},
		{
			// A budget's decision is on no rung of the ladder: its level is
			// "none", a loop's budget-ended turn included, and its
			// recovery counts there too; a deep rung counts under "8+".
			name: "level labels",
			requests: []RequestInfo{
				{Session: "s1", Decision: &policy.Decision{Action: policy.Warn, Would: policy.Warn, Level: -1,
					Budget: &policy.BudgetUse{Kind: policy.BudgetTurns, Used: 4, Limit: 5}}},
				{Session: "s2", Decision: func() *policy.Decision {
					d := loopDecision(inspect.ToolRepetition, policy.Terminate, -1, "p")
					d.Budget = &policy.BudgetUse{Kind: policy.BudgetTokens, Used: 120, Limit: 100, Exceeded: true}
					return d
				}()},
				{Session: "s2", Decision: &policy.Decision{Action: policy.None, Level: -1, Recovered: []string{"p"}}},
				{Session: "s3", Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 11, "q")},
			},
			want: []sample{
				{"loopguard_interventions_total", map[string]string{"category": "budget", "action": "warn", "level": "none"}, 1},
				{"loopguard_interventions_total", map[string]string{"category": "tool_repetition", "action": "terminate", "level": "none"}, 1},
				{"loopguard_interventions_total", map[string]string{"level": "0"}, 0},
				{"loopguard_interventions_total", map[string]string{"action": "warn", "level": "8+"}, 1},
				{"loopguard_recoveries_total", map[string]string{"level": "none", "outcome": "recovered"}, 1},
			},
		},
		{
			name:  "session cache",
			cache: inspect.CacheStats{Hits: 9, Misses: 2, Bytes: 4096, Sessions: 2},
			want: []sample{
				{"loopguard_inspect_cache_hits_total", nil, 9},
				{"loopguard_inspect_cache_misses_total", nil, 2},
				{"loopguard_inspect_cache_bytes", nil, 4096},
			},
		},
		{
			name:     "fail open by stage",
			failOpen: []Stage{StageStore, StageStore, StageInject, "something new"},
			want: []sample{
				{"loopguard_fail_open_total", map[string]string{"stage": "store"}, 2},
				{"loopguard_fail_open_total", map[string]string{"stage": "inject"}, 1},
				{"loopguard_fail_open_total", map[string]string{"stage": "other"}, 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, reg, _, _ := newTestObserver(t, Options{})
			if tt.cache != (inspect.CacheStats{}) {
				o.WatchSessionCache(func() inspect.CacheStats { return tt.cache })
			}
			for range tt.streams {
				o.StreamOpened()
			}
			for _, r := range tt.requests {
				o.Request(r)
			}
			for _, r := range tt.responses {
				o.Response(r)
			}
			for _, s := range tt.failOpen {
				o.FailOpen(s)
			}
			for _, s := range tt.want {
				if got := metricValue(t, reg, s.name, s.labels); got != s.want {
					t.Errorf("%s%v = %v; want %v", s.name, s.labels, got, s.want)
				}
			}
		})
	}
}

// TestFailOpenStages: the stage label's values are the stages the proxy
// names its failures by, and other; none is a label nothing writes.
func TestFailOpenStages(t *testing.T) {
	_, reg, _, _ := newTestObserver(t, Options{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "loopguard_fail_open_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				got = append(got, l.GetValue())
			}
		}
	}
	slices.Sort(got)
	want := []string{"detector", "inject", "other", "panic", "policy", "store", "stream", "terminate", "undecodable_body", "unreadable_history"}
	if !slices.Equal(got, want) {
		t.Errorf("fail-open stages %q; want %q", got, want)
	}
}

func TestMetricNamesFollowConventions(t *testing.T) {
	o, reg, _, _ := newTestObserver(t, Options{})
	o.Request(RequestInfo{Session: "s", Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p"), DetectDuration: 1, StoreDuration: 1})
	o.Response(ResponseInfo{Session: "s", Path: "/v1/chat/completions", Status: 200, Events: 1, Duration: 1, TTFB: 1, UpstreamLatency: 1, Cut: policy.Cut{Category: inspect.TokenDegeneration, TokensSaved: 1}})
	o.FailOpen(StageStore)
	o.StreamOpened()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) < 13 {
		t.Errorf("gathered %d metric families; want at least 13 (every family touched)", len(mfs))
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "loopguard_") {
			t.Errorf("metric %s lacks the loopguard_ prefix", name)
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			if !strings.HasSuffix(name, "_total") {
				t.Errorf("counter %s does not end in _total", name)
			}
		case dto.MetricType_HISTOGRAM:
			if !strings.HasSuffix(name, "_seconds") {
				t.Errorf("histogram %s does not end in _seconds", name)
			}
		}
	}
}

func TestNewMetricsTwiceOnOneRegistryFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("NewMetrics on a registry that holds loopguard's collectors = nil error; want a registration error")
	}
}

// recoveryCase is one fixture of testdata/recovery.json: the decisions a
// session's requests got, in order, and the outcome counts they make.
type recoveryCase struct {
	Name  string `json:"name"`
	Steps []struct {
		Action    policy.Action    `json:"action"`
		Would     policy.Action    `json:"would"`
		Pattern   string           `json:"pattern"`
		Category  inspect.Category `json:"category"`
		Level     int              `json:"level"`
		Reapplied bool             `json:"reapplied"`
		Recovered []string         `json:"recovered"`
	} `json:"steps"`
	Want  []Recovery `json:"want"`
	State string     `json:"state"`
}

func TestRecoveryAccounting(t *testing.T) {
	b, err := os.ReadFile("testdata/recovery.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []recoveryCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			o, reg, _, c := newTestObserver(t, Options{})
			for _, s := range tt.Steps {
				d := &policy.Decision{Action: policy.None, Level: -1, Recovered: s.Recovered}
				if s.Action != "" {
					d = loopDecision(s.Category, s.Action, s.Level, s.Pattern)
					d.Reapplied, d.Recovered = s.Reapplied, s.Recovered
					if s.Would != "" {
						d.Would = s.Would
					}
				}
				o.Request(RequestInfo{Session: "sess", Model: "m", Decision: d})
			}
			got := o.Recorder().Stats(Filter{}, c.t).Recovery
			if got == nil {
				got = []Recovery{}
			}
			if !reflect.DeepEqual(got, tt.Want) {
				t.Errorf("recovery = %+v; want %+v", got, tt.Want)
			}
			var rec, again float64
			for _, w := range tt.Want {
				rec += float64(w.Recovered)
				again += float64(w.LoopedAgain)
			}
			if m := metricValue(t, reg, "loopguard_recoveries_total", map[string]string{"outcome": "recovered"}); m != rec {
				t.Errorf("loopguard_recoveries_total{outcome=recovered} = %v; want %v", m, rec)
			}
			if m := metricValue(t, reg, "loopguard_recoveries_total", map[string]string{"outcome": "looped_again"}); m != again {
				t.Errorf("loopguard_recoveries_total{outcome=looped_again} = %v; want %v", m, again)
			}
			sum, _, ok := o.Recorder().Session("sess")
			if !ok {
				t.Fatal("Session(sess) not found")
			}
			if sum.State != tt.State {
				t.Errorf("state = %q; want %q", sum.State, tt.State)
			}
		})
	}
}

func TestLogEventsCarryNoContent(t *testing.T) {
	tests := []struct {
		name       string
		logContent bool
		wantBrief  bool
	}{
		{"default", false, false},
		{"log_content", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, _, logs, _ := newTestObserver(t, Options{LogContent: tt.logContent})
			o.Request(RequestInfo{Session: "sess-1", Model: "m", Tool: "bash", Fingerprint: 0xdeadbeef01020304,
				Decision: loopDecision(inspect.ToolRepetition, policy.Constrain, 1, "pat-1")})
			line := logs.String()
			var ev map[string]any
			if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &ev); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			for k, want := range map[string]any{
				"session": "sess-1", "category": "tool_repetition", "action": "constrain", "level": 1.0,
				"confidence": 0.93, "pattern_key": "pat-1", "fingerprint": "deadbeef01020304", "tool": "bash",
				"count": 3.0, "message": "loop intervention",
			} {
				if ev[k] != want {
					t.Errorf("event[%s] = %v; want %v", k, ev[k], want)
				}
			}
			if got := strings.Contains(line, "secret-token"); got != tt.wantBrief {
				t.Errorf("log mentions the call's argument: %v; want %v (line %s)", got, tt.wantBrief, line)
			}
		})
	}
}

func TestNilObserverDoesNothing(t *testing.T) {
	var o *Observer
	o.Request(RequestInfo{Session: "s"})
	o.Response(ResponseInfo{Status: 200})
	o.StreamOpened()
	o.FailOpen(StageStore)
}

// TestTimelineTransport: request and cut entries name how the turn came.
func TestTimelineTransport(t *testing.T) {
	o, err := New(nil, zerolog.Nop(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.Request(RequestInfo{Session: "s1", Model: "m", Decision: &policy.Decision{Action: policy.None, Level: -1}})
	o.Request(RequestInfo{Session: "s1", Model: "m", Transport: TransportWebSocket, Decision: &policy.Decision{Action: policy.None, Level: -1}})
	o.Response(ResponseInfo{Session: "s1", Path: "/v1/responses", Status: 200, Transport: TransportWebSocket,
		Cut: policy.Cut{Category: inspect.TokenDegeneration, Offset: 10, TokensSaved: 5}})
	_, tl, ok := o.Recorder().Session("s1")
	if !ok {
		t.Fatal("no session s1")
	}
	var got []string
	for _, e := range tl {
		got = append(got, string(e.Kind)+":"+e.Transport)
	}
	if strings.Join(got, " ") != "request:http request:websocket cut:websocket" {
		t.Fatalf("timeline %q", got)
	}
}
