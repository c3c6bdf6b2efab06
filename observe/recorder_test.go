package observe

import (
	"fmt"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/policy"
)

func TestRecorderEvictsLeastRecentlySeen(t *testing.T) {
	o, _, _, _ := newTestObserver(t, Options{MaxSessions: 3})
	for _, k := range []string{"a", "b", "c", "a", "d"} {
		o.Request(RequestInfo{Session: k})
	}
	list := o.Recorder().Sessions(Filter{})
	var got []string
	for _, s := range list.Sessions {
		got = append(got, s.Key)
	}
	if fmt.Sprint(got) != "[d a c]" {
		t.Errorf("sessions = %v; want [d a c] (b evicted, newest first)", got)
	}
	if list.Total != 3 {
		t.Errorf("Total = %d; want 3", list.Total)
	}
}

// TestTimelineNamesAPI: each request entry says which wire API it came in.
func TestTimelineNamesAPI(t *testing.T) {
	o, _, _, _ := newTestObserver(t, Options{})
	for _, api := range []inspect.API{wireapi.Chat, wireapi.Ollama} {
		o.Request(RequestInfo{Session: "s", API: api})
	}
	_, tl, _ := o.Recorder().Session("s")
	var got []inspect.API
	for _, e := range tl {
		got = append(got, e.API)
	}
	if fmt.Sprint(got) != "[chat ollama]" {
		t.Errorf("timeline APIs %v; want [chat ollama]", got)
	}
}

func TestTimelineRingKeepsNewest(t *testing.T) {
	o, _, _, c := newTestObserver(t, Options{Timeline: 4})
	for i := 1; i <= 10; i++ {
		c.t = c.t.Add(time.Second)
		o.Request(RequestInfo{Session: "s", Steps: i, Tool: "bash", Fingerprint: uint64(i)})
	}
	sum, tl, ok := o.Recorder().Session("s")
	if !ok {
		t.Fatal("Session(s) not found")
	}
	if sum.Requests != 10 {
		t.Errorf("Requests = %d; want 10", sum.Requests)
	}
	var steps []int
	for _, e := range tl {
		steps = append(steps, e.Steps)
	}
	if fmt.Sprint(steps) != "[7 8 9 10]" {
		t.Errorf("timeline steps = %v; want [7 8 9 10]", steps)
	}
	if _, _, ok := o.Recorder().Session("nope"); ok {
		t.Error("Session(nope) found; want not found")
	}
}

func TestSessionsFilter(t *testing.T) {
	o, _, _, c := newTestObserver(t, Options{})
	o.Request(RequestInfo{Session: "loop-a", Model: "gpt", Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p")})
	o.Request(RequestInfo{Session: "loop-b", Model: "llama", Decision: loopDecision(inspect.ErrorCycle, policy.Constrain, 1, "q")})
	o.Request(RequestInfo{Session: "calm", Model: "gpt", Decision: &policy.Decision{Action: policy.None, Level: -1}})
	o.Response(ResponseInfo{Session: "calm", Status: 200, Cut: policy.Cut{Category: inspect.TokenDegeneration, TokensSaved: 10}})
	_ = c
	tests := []struct {
		give Filter
		want string
	}{
		{Filter{}, "[calm loop-b loop-a]"},
		{Filter{Model: "gpt"}, "[calm loop-a]"},
		{Filter{Category: inspect.ErrorCycle}, "[loop-b]"},
		{Filter{Category: inspect.TokenDegeneration}, "[calm]"},
		{Filter{State: StateWarned}, "[loop-a]"},
		{Filter{State: StateCut}, "[calm]"},
		{Filter{Limit: 1}, "[calm]"},
		{Filter{Model: "nobody"}, "[]"},
	}
	for _, tt := range tests {
		list := o.Recorder().Sessions(tt.give)
		var got []string
		for _, s := range list.Sessions {
			got = append(got, s.Key)
		}
		if fmt.Sprint(got) != tt.want {
			t.Errorf("Sessions(%+v) = %v; want %s", tt.give, got, tt.want)
		}
	}
	if n := o.Recorder().Sessions(Filter{Limit: 1}).Matched; n != 3 {
		t.Errorf("Matched with Limit 1 = %d; want 3", n)
	}
}

func TestStatsBuckets(t *testing.T) {
	o, _, _, c := newTestObserver(t, Options{Buckets: 5})
	start := c.t
	o.Request(RequestInfo{Session: "a", Model: "gpt", Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p")})
	o.Request(RequestInfo{Session: "b", Model: "llama", Decision: loopDecision(inspect.ErrorCycle, policy.Terminate, 2, "q")})
	c.t = start.Add(2 * time.Minute)
	o.Request(RequestInfo{Session: "a", Model: "gpt", Decision: loopDecision(inspect.ToolRepetition, policy.Constrain, 1, "p")})
	o.Response(ResponseInfo{Session: "a", Status: 200, Cut: policy.Cut{Category: inspect.TokenDegeneration, TokensSaved: 50}})
	o.Request(RequestInfo{Session: "c", Model: "gpt"})

	tests := []struct {
		name           string
		give           Filter
		at             time.Duration
		wantDetections []int
		wantCuts       []int
		wantRequests   int
	}{
		{"all", Filter{}, 2 * time.Minute, []int{0, 0, 2, 0, 1}, []int{0, 0, 0, 0, 1}, 4},
		{"model", Filter{Model: "llama"}, 2 * time.Minute, []int{0, 0, 1, 0, 0}, []int{0, 0, 0, 0, 0}, 1},
		{"category", Filter{Category: inspect.ToolRepetition}, 2 * time.Minute, []int{0, 0, 1, 0, 1}, []int{0, 0, 0, 0, 0}, 4},
		{"old buckets expire", Filter{}, 7 * time.Minute, []int{0, 0, 0, 0, 0}, []int{0, 0, 0, 0, 0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := o.Recorder().Stats(tt.give, start.Add(tt.at))
			if st.BucketSeconds != 60 || len(st.Buckets) != 5 {
				t.Fatalf("BucketSeconds %d, %d buckets; want 60, 5", st.BucketSeconds, len(st.Buckets))
			}
			var det, cuts []int
			for _, b := range st.Buckets {
				det = append(det, b.Detections)
				cuts = append(cuts, b.Cuts)
			}
			if fmt.Sprint(det) != fmt.Sprint(tt.wantDetections) {
				t.Errorf("detections = %v; want %v", det, tt.wantDetections)
			}
			if fmt.Sprint(cuts) != fmt.Sprint(tt.wantCuts) {
				t.Errorf("cuts = %v; want %v", cuts, tt.wantCuts)
			}
			if st.Totals.Requests != tt.wantRequests {
				t.Errorf("requests = %d; want %d", st.Totals.Requests, tt.wantRequests)
			}
		})
	}
	st := o.Recorder().Stats(Filter{}, start.Add(2*time.Minute))
	if fmt.Sprint(st.Models) != "[gpt llama]" {
		t.Errorf("Models = %v; want [gpt llama]", st.Models)
	}
	if got := st.Buckets[2].DetectionsBy[inspect.ErrorCycle]; got != 1 {
		t.Errorf("DetectionsBy[error_cycle] = %d; want 1", got)
	}
	if st.Totals.Terminations != 1 || st.Totals.TokensSaved != 50 {
		t.Errorf("terminations %d, tokens saved %d; want 1, 50", st.Totals.Terminations, st.Totals.TokensSaved)
	}
}

func TestStatsBoundsModels(t *testing.T) {
	o, _, _, c := newTestObserver(t, Options{})
	for i := range maxStatKeys + 50 {
		o.Request(RequestInfo{Session: "s", Model: fmt.Sprintf("model-%d", i)})
	}
	st := o.Recorder().Stats(Filter{}, c.t)
	if len(st.Models) > maxStatKeys+1 {
		t.Errorf("%d models in stats; want at most %d", len(st.Models), maxStatKeys+1)
	}
	if st.Totals.Requests != maxStatKeys+50 {
		t.Errorf("requests = %d; want %d (overflow counted as other)", st.Totals.Requests, maxStatKeys+50)
	}
}

func TestSinceResumesFeed(t *testing.T) {
	o, _, _, _ := newTestObserver(t, Options{Feed: 4})
	r := o.Recorder()
	for i := range 6 {
		o.Request(RequestInfo{Session: fmt.Sprint("s", i)})
	}
	tests := []struct {
		since    uint64
		limit    int
		wantSeqs string
		wantNext uint64
	}{
		{0, 10, "[3 4 5 6]", 6}, // 1 and 2 scrolled out
		{4, 10, "[5 6]", 6},
		{4, 1, "[5]", 5},
		{6, 10, "[]", 6},
		{99, 10, "[]", 6},
	}
	for _, tt := range tests {
		es, next := r.Since(tt.since, tt.limit)
		seqs := []uint64{}
		for _, e := range es {
			seqs = append(seqs, e.Seq)
		}
		if fmt.Sprint(seqs) != tt.wantSeqs || next != tt.wantNext {
			t.Errorf("Since(%d, %d) = %v, %d; want %s, %d", tt.since, tt.limit, seqs, next, tt.wantSeqs, tt.wantNext)
		}
	}
}

func TestFingerprintText(t *testing.T) {
	tests := []struct {
		give Fingerprint
		want string
	}{
		{0, ""},
		{1, "0000000000000001"},
		{0xdeadbeef01020304, "deadbeef01020304"},
	}
	for _, tt := range tests {
		b, _ := tt.give.MarshalText()
		if string(b) != tt.want {
			t.Errorf("Fingerprint(%#x).MarshalText() = %q; want %q", uint64(tt.give), b, tt.want)
		}
	}
}

// TestRecorderCountsReportedTokens: a session sums the usage its answers
// reported, and apart the usage of answers to requests that showed a loop.
func TestRecorderCountsReportedTokens(t *testing.T) {
	o, _, _, _ := newTestObserver(t, Options{})
	steps := []struct {
		loop  bool
		usage Usage
	}{
		{false, Usage{Input: 100, Output: 10}},
		{true, Usage{Input: 200, Output: 20}},
		{true, Usage{}}, // the upstream reported nothing
		{false, Usage{Input: 400, Output: 40}},
	}
	for _, st := range steps {
		d := &policy.Decision{Action: policy.None, Level: -1}
		if st.loop {
			d = loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p")
		}
		o.Request(RequestInfo{Session: "s", Decision: d})
		o.Response(ResponseInfo{Session: "s", Status: 200, Usage: st.usage})
	}
	o.Response(ResponseInfo{Path: "/v1/models", Status: 200, Usage: Usage{Input: 9}}) // no session
	sum, _, _ := o.Recorder().Session("s")
	if sum.Tokens != (Usage{Input: 700, Output: 70}) || sum.LoopTokens != (Usage{Input: 200, Output: 20}) {
		t.Fatalf("Tokens = %+v, LoopTokens = %+v; want {700 70} and {200 20}", sum.Tokens, sum.LoopTokens)
	}
}

// TestRecorderCountsHowCallsEnded: a session counts its model calls by
// how they ended; a call whose agent left counts neither way.
func TestRecorderCountsHowCallsEnded(t *testing.T) {
	o, _, _, _ := newTestObserver(t, Options{})
	for _, status := range []int{200, 200, 429, 502, 504, 499, 500} {
		o.Request(RequestInfo{Session: "s", Decision: &policy.Decision{Action: policy.None, Level: -1}})
		o.Response(ResponseInfo{Session: "s", Status: status})
	}
	sum, _, _ := o.Recorder().Session("s")
	if sum.Requests != 7 || sum.Answered != 2 || sum.Refused != 1 || sum.Failed != 3 {
		t.Fatalf("requests %d: answered %d, refused %d, failed %d; want 7: 2, 1, 3", sum.Requests, sum.Answered, sum.Refused, sum.Failed)
	}
}

func TestFingerprintTextRoundTrip(t *testing.T) {
	for _, f := range []Fingerprint{0, 1, 0xaa, 0xfedcba9876543210} {
		b, err := f.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got Fingerprint
		if err := got.UnmarshalText(b); err != nil || got != f {
			t.Errorf("UnmarshalText(%q) = %x, %v; want %x", b, uint64(got), err, uint64(f))
		}
	}
	var f Fingerprint
	if err := f.UnmarshalText([]byte("xyz")); err == nil {
		t.Error("UnmarshalText(xyz) succeeded; want an error")
	}
}
