package judge

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopguard/loopguard/e2e/llamaserver"
	"github.com/loopguard/loopguard/inspect"
)

// TestLlamaJudge asks llama.cpp's real llama-server (a tiny random model;
// skipped unless present, a failure with LOOPGUARD_REQUIRE_LLAMA): the
// request must be one it accepts, its json_schema grammar must yield a
// verdict ParseVerdict reads, and the session's budget must hold. What the
// verdicts say means nothing: the model's weights are random.
func TestLlamaJudge(t *testing.T) {
	llama := llamaserver.Start(t, llamaserver.Options{Slots: 2, Context: 8192})
	var (
		mu      sync.Mutex
		results []Result
	)
	cfg := DefaultConfig()
	cfg.Enabled, cfg.URL, cfg.Model = true, llama.URL, "tiny"
	cfg.MinTurns, cfg.Every, cfg.SessionCallsPerMinute = 1, 1, 2
	cfg.Timeout = 30 * time.Second
	j := New(cfg, func(r Result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	})
	defer j.Close()

	tr := &inspect.Trajectory{}
	for i := range 6 {
		tr.Steps = append(tr.Steps, inspect.Step{Text: "Maybe another installer works.", Calls: []inspect.Call{
			{Name: "bash", Args: `{"command":"pip install pkg` + strings.Repeat("!", i) + `"}`,
				Result: "ERROR: no matching distribution", HasResult: true, IsError: true}}})
		if j.Due("llama", len(tr.Steps), false) {
			j.Submit(Job{Session: "llama", Digest: Digest(tr, "Install pkg.", cfg.MaxDigestBytes), Step: i})
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(results)
		mu.Unlock()
		if n >= 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	calls, over := 0, 0
	for _, r := range results {
		switch r.Outcome {
		case Stuck, NotStuck:
			calls++
			if r.Tokens <= 0 {
				t.Errorf("verdict with %d tokens; want the usage llama-server reports", r.Tokens)
			}
		case OverBudget:
			over++
		default:
			t.Errorf("check ended %s (%v); want a verdict", r.Outcome, r.Err)
		}
	}
	if calls != 2 || over != 4 {
		t.Errorf("%d verdicts, %d over budget; want 2 and 4 (session budget 2 a minute)", calls, over)
	}
	t.Logf("results: %+v", results)
}
