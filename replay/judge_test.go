package replay

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/proxy"
)

// judgedConfig checks a session from its fourth turn, every second turn,
// every turn after a stuck verdict, with the judge at url.
func judgedConfig(url string) proxy.Config {
	cfg := proxy.DefaultConfig()
	cfg.Judge.Enabled = true
	cfg.Judge.URL = url
	cfg.Judge.Model = "judge-m"
	cfg.Judge.MinTurns = 4
	cfg.Judge.Every = 2
	cfg.Judge.EveryDoubtful = 1
	cfg.Judge.Timeout = 2 * time.Second
	return cfg
}

// replayJudged replays testdata/semantic_loop.jsonl, an agent rewording one
// failing approach with other commands and other errors, and returns each
// record's action and judge outcome.
func replayJudged(t *testing.T, cfg proxy.Config) (actions, outcomes []string, results []Result) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Main(cfg, []string{"testdata/semantic_loop.jsonl"}, &out, &errOut); code != 0 {
		t.Fatalf("Main = %d; want 0 (stderr %s)", code, errOut.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r Result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("bad result line %q: %v", l, err)
		}
		actions = append(actions, r.Action)
		outcomes = append(outcomes, r.Judge)
		results = append(results, r)
	}
	return actions, outcomes, results
}

// TestReplayJudgeWarnsThenConstrainsSemanticLoop: no rule fires on the
// semantic loop; with a scripted judge that finds it stuck, replay warns
// then constrains it on the same records on every run, because each due
// check finishes before the session's next record, whether the judge is
// judge.url or, by default, upstream.url.
func TestReplayJudgeWarnsThenConstrainsSemanticLoop(t *testing.T) {
	actions, _, _ := replayJudged(t, proxy.DefaultConfig())
	if want := slices.Repeat([]string{"none"}, 7); !slices.Equal(actions, want) {
		t.Fatalf("judge off: actions = %v; want %v (the rules must not see this loop)", actions, want)
	}

	// A judge as slow as a small model still lands on the next record.
	j := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{{Response: fakellm.Response{
		Content: `{"stuck":true,"confidence":0.85,"what_repeats":"installing fastjsonx one way after another"}`,
		Delay:   150 * time.Millisecond}}}})
	for run := 0; run < 2; run++ {
		cfg := judgedConfig(j.URL())
		if run == 1 {
			// Without judge.url, the judge asks the configured upstream,
			// not replay's player of records.
			cfg.Judge.URL, cfg.Upstream.URL = "", j.URL()
		}
		actions, outcomes, results := replayJudged(t, cfg)
		// Checks are due from the fourth record, then every second one,
		// then every one once the judge found the session stuck; each
		// verdict counts on the next record.
		wantActions := []string{"none", "none", "none", "none", "warn", "none", "constrain"}
		wantOutcomes := []string{"", "", "", "stuck", "", "stuck", "stuck"}
		if !slices.Equal(actions, wantActions) || !slices.Equal(outcomes, wantOutcomes) {
			t.Fatalf("run %d: actions = %v, judge = %v; want %v, %v", run, actions, outcomes, wantActions, wantOutcomes)
		}
		for _, r := range results[4:] {
			if r.Action != "none" && (r.Category != "semantic_loop" || !r.Loop) {
				t.Errorf("run %d: %s = %+v; want a semantic_loop", run, r.ID, r)
			}
		}
	}
	if n := len(j.Requests()); n != 6 {
		t.Errorf("judge got %d requests; want 6 (three a run)", n)
	}
}

// TestReplayJudgeDownChangesNothing: with the judge unreachable, every due
// check fails open and no record is warned.
func TestReplayJudgeDownChangesNothing(t *testing.T) {
	actions, outcomes, _ := replayJudged(t, judgedConfig("http://127.0.0.1:1"))
	if want := slices.Repeat([]string{"none"}, 7); !slices.Equal(actions, want) {
		t.Errorf("actions = %v; want %v", actions, want)
	}
	if want := []string{"", "", "", "failed", "", "failed", ""}; !slices.Equal(outcomes, want) {
		t.Errorf("judge = %v; want %v", outcomes, want)
	}
}
