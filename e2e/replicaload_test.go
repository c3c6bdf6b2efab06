package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/internal/redistest"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/proxy"
)

// storeLatency is the decide histogram of loopguard_store_latency_seconds:
// cumulative counts by upper bound, summed over replicas.
type storeLatency map[float64]float64

const storeDecideBucket = `loopguard_store_latency_seconds_bucket{op="decide",le="`

func (h storeLatency) add(t *testing.T, base string) {
	t.Helper()
	scrape(t, base, func(line string) {
		rest, ok := strings.CutPrefix(line, storeDecideBucket)
		if !ok {
			return
		}
		le, val, _ := strings.Cut(rest, `"} `)
		bound, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(val, 64)
		if err1 == nil && err2 == nil {
			h[bound] += n
		}
	})
}

// quantile is the upper bound of the bucket holding quantile q.
func (h storeLatency) quantile(q float64) (bound, count float64) {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	total := h[bounds[len(bounds)-1]] // +Inf
	for _, b := range bounds {
		if h[b] >= q*total {
			return b, total
		}
	}
	return bounds[len(bounds)-1], total
}

// TestReplicasUnderLoad: three replicas on one redis, 100 agents looping at
// once, each agent's turns spread round-robin over the replicas. Every
// agent climbs the ladder exactly as through one proxy, and redis holds
// every step (no lost update, no store failure). It reports the store's
// p99 decide time (from the replicas' histograms) and the agents' p99 turn.
func TestReplicasUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	rs := redistest.Start(t)
	fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
	var reps []*lgServer
	for i := range 3 {
		reps = append(reps, startReplica(t, fake.URL(), rs.URL(0), "replica-"+strconv.Itoa(i)))
	}
	want := ladderActions(t, "reference", startLoopguard(t, fake.URL(), nil).URL)
	if want[len(want)-1] != string(policy.Terminate) {
		t.Fatalf("one proxy: actions %q; want the ladder to end in terminate", want)
	}

	const agents = 100
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: agents}}
	t.Cleanup(client.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make([][]string, agents)
	turns := make([][]time.Duration, agents)
	start := time.Now()
	var wg sync.WaitGroup
	for a := range agents {
		wg.Go(func() {
			session := fmt.Sprintf("agent-%03d", a)
			for n := range len(want) {
				rep := reps[(a+n)%len(reps)]
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, rep.URL+"/v1/chat/completions", strings.NewReader(loopingBody(n, false)))
				if err != nil {
					return
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-ID", session)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("%s turn %d: %v", session, n, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				turns[a] = append(turns[a], time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s turn %d: status %d", session, n, resp.StatusCode)
				}
				got[a] = append(got[a], resp.Header.Get(proxy.HeaderAction))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("the agents did not finish within 30s")
	}

	var all []time.Duration
	for a := range agents {
		all = append(all, turns[a]...)
		if !slices.Equal(got[a], want) {
			t.Errorf("agent-%03d: actions %q over three replicas; one proxy: %q", a, got[a], want)
			continue
		}
		s := loadState(t, rs.URL(0), fmt.Sprintf("agent-%03d", a))
		if ivs := interventionActions(s); !slices.Equal(ivs, []policy.Action{policy.Warn, policy.Constrain, policy.Terminate}) {
			t.Errorf("agent-%03d: interventions in redis %q; want warn, constrain, terminate", a, ivs)
		}
	}
	storeFails := 0
	for _, rep := range reps {
		for _, e := range rep.seen() {
			if e.StoreFail {
				storeFails++
			}
		}
	}
	if storeFails > 0 {
		t.Errorf("%d turns failed open on the store", storeFails)
	}
	h := storeLatency{}
	for _, rep := range reps {
		h.add(t, rep.URL)
	}
	p99, calls := h.quantile(0.99)
	p50, _ := h.quantile(0.5)
	if int(calls) != agents*len(want) {
		t.Errorf("store histograms count %v decide calls; want %d", calls, agents*len(want))
	}
	slices.Sort(all)
	t.Logf("%d agents x %d turns over 3 replicas in %v (%.0f turns/s); turn p50 %v p99 %v; store decide p50 <= %gms, p99 <= %gms (histogram bucket bounds, %v calls)",
		agents, len(want), elapsed.Round(time.Millisecond), float64(len(all))/elapsed.Seconds(),
		all[len(all)/2].Round(time.Microsecond), all[len(all)*99/100].Round(time.Microsecond), p50*1000, p99*1000, calls)
}
