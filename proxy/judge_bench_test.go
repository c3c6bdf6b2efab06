package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
)

// growingTurns returns the request bodies of one healthy agent session, turn
// by turn: turn n carries n steps, each reading another file.
func growingTurns(turns int) [][]byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"Fix the failing test."}`)
	bodies := make([][]byte, turns)
	for i := range turns {
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Reading file %d next.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/file%d.go\"}"}}]}`, i, i, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":%q}`, i, strings.Repeat(fmt.Sprintf("line %d of file %d\n", i, i), 40))
		bodies[i] = []byte(b.String() + `]}`)
	}
	return bodies
}

// BenchmarkJudgeTurnLatency measures what the judge adds to a turn. Four
// proxies run side by side: the judge off, on with a judge that answers at
// once, on with one that takes 200ms (its queue fills and checks are
// dropped), and on with the fast judge on the default schedule. Each iteration plays judgeSessions concurrent agent sessions of
// judgeTurns growing turns through each proxy in turn, in a rotating order,
// so that a shared machine's load falls on all three alike; the p50 and p99
// of each proxy's turns are reported. Except in fast-defaults, the judge
// checks from the fourth turn, every second one: more often than the
// defaults, so that a digest is built on many turns. The fake judges serve
// in the benchmark's process, on the same cores as the proxies.
//
//	go test -run '^$' -bench JudgeTurnLatency -benchtime 10x ./proxy/
func BenchmarkJudgeTurnLatency(b *testing.B) {
	const judgeSessions, judgeTurns = 8, 40
	bodies := growingTurns(judgeTurns)
	notStuck := fakellm.Response{Content: `{"stuck":false,"confidence":0,"what_repeats":""}`}
	slowAnswer := notStuck
	slowAnswer.Delay = 200 * time.Millisecond
	up := benchUpstream(b)
	type target struct {
		name     string
		judge    *fakellm.Server
		defaults bool // the default schedule, not every second turn
		base     string
		took     []time.Duration
	}
	targets := []*target{
		{name: "off"},
		{name: "fast", judge: fakellm.Start(b, fakellm.Script{Rules: []fakellm.Rule{{Response: notStuck}}})},
		{name: "slow", judge: fakellm.Start(b, fakellm.Script{Rules: []fakellm.Rule{{Response: slowAnswer}}})},
		{name: "fast-defaults", judge: fakellm.Start(b, fakellm.Script{Rules: []fakellm.Rule{{Response: notStuck}}}), defaults: true},
	}
	for _, tg := range targets {
		_, tg.base = startProxy(b, func(c *Config) {
			c.Upstream.URL = up
			if tg.judge == nil {
				return
			}
			c.Judge.Enabled, c.Judge.URL, c.Judge.Model = true, tg.judge.URL(), "judge-m"
			if !tg.defaults {
				c.Judge.MinTurns, c.Judge.Every = 4, 2
			}
			c.Judge.SessionCallsPerMinute, c.Judge.CallsPerMinute = 1<<20, 1<<20
			c.Judge.SessionTokensPerMinute, c.Judge.TokensPerMinute = 1<<30, 1<<30
		})
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: judgeSessions, DisableCompression: true}}
	defer client.CloseIdleConnections()
	// play runs one round of sessions through tg.
	play := func(tg *target, round int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for s := range judgeSessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("bench-%d-%d", round, s)
				mine := make([]time.Duration, 0, judgeTurns)
				for _, body := range bodies {
					req, _ := http.NewRequest(http.MethodPost, tg.base+"/v1/chat/completions", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Loopguard-Session", key)
					t0 := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mine = append(mine, time.Since(t0))
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
				mu.Lock()
				tg.took = append(tg.took, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	b.ResetTimer()
	for round := range b.N {
		for i := range targets {
			play(targets[(round+i)%len(targets)], round)
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, tg := range targets {
		if len(tg.took) == 0 {
			continue
		}
		slices.Sort(tg.took)
		b.ReportMetric(ms(tg.took[len(tg.took)/2]), tg.name+"-p50-ms")
		b.ReportMetric(ms(tg.took[len(tg.took)*99/100]), tg.name+"-p99-ms")
		if tg.judge != nil {
			b.ReportMetric(float64(len(tg.judge.Requests()))/float64(b.N), tg.name+"-judge-calls/op")
		}
	}
}
