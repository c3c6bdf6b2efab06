package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/internal/redistest"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/proxy"
)

// startReplicas runs two loopguard proxies, named replica-0 and replica-1,
// sharing the redis server at url, both in front of upstream.
func startReplicas(t *testing.T, upstream, url string) [2]*lgServer {
	t.Helper()
	return [2]*lgServer{startReplica(t, upstream, url, "replica-0"), startReplica(t, upstream, url, "replica-1")}
}

// startReplica runs a loopguard proxy named name on the redis store at url.
func startReplica(t *testing.T, upstream, url, name string) *lgServer {
	t.Helper()
	return startLoopguard(t, upstream, func(c *proxy.Config) {
		c.Policy.Store = policy.StoreRedis
		c.Policy.RedisURL = url
		// Loopback redis under -race on a shared 2-core machine can take
		// longer than the 50ms default; a timeout would fail open and hide
		// the behaviour under test.
		c.Policy.StoreTimeout = time.Second
		c.Admin.Replica = name
	})
}

// loadState reads a session's state straight from redis.
func loadState(t *testing.T, url, key string) policy.State {
	t.Helper()
	st, err := policy.NewRedisStore(policy.Config{RedisURL: url, StoreTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := st.Load(context.Background(), key)
	if err != nil {
		t.Fatalf("load %s: %v", key, err)
	}
	return s
}

func interventionActions(s policy.State) []policy.Action {
	var out []policy.Action
	for _, iv := range s.Interventions {
		out = append(out, iv.Action)
	}
	return out
}

// ladderActions sends the looping agent's growing history (0..5 failed
// builds) to bases in turn and returns the action header of each answer.
func ladderActions(t *testing.T, session string, bases ...string) []string {
	t.Helper()
	var got []string
	for n := 0; n <= 5; n++ {
		ex := postRaw(t, bases[n%len(bases)], loopingBody(n, false), map[string]string{"X-Session-ID": session})
		if ex.status != http.StatusOK {
			t.Fatalf("%d calls: status %d: %s", n, ex.status, ex.body)
		}
		got = append(got, ex.header.Get(proxy.HeaderAction))
	}
	return got
}

// TestRedisReplicasShareLadder: a looping agent whose requests alternate
// between two replicas climbs the ladder exactly as with one proxy.
func TestRedisReplicasShareLadder(t *testing.T) {
	rs := redistest.Start(t)
	fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
	reps := startReplicas(t, fake.URL(), rs.URL(0))
	single := startLoopguard(t, fake.URL(), nil)

	want := ladderActions(t, "one-proxy", single.URL)
	got := ladderActions(t, "two-replicas", reps[0].URL, reps[1].URL)
	if len(got) != len(want) {
		t.Fatalf("replicas: %q; one proxy: %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("replicas: actions %q; one proxy: %q", got, want)
			break
		}
	}
	if want[len(want)-1] != "terminate" {
		t.Errorf("one proxy: actions %q; want the ladder to end in terminate", want)
	}
	s := loadState(t, rs.URL(0), "two-replicas")
	if a := interventionActions(s); len(a) != 3 || a[0] != policy.Warn || a[1] != policy.Constrain || a[2] != policy.Terminate {
		t.Errorf("redis state interventions = %q; want warn, constrain, terminate", a)
	}
	for _, rep := range reps {
		for _, e := range rep.seen() {
			if e.StoreFail || e.FailOpen != "" {
				t.Errorf("replica event %+v: the store failed", e)
			}
		}
	}
}

// fireConcurrently sends n copies of body of one session at once, spread
// over bases, and returns the action header of each answer.
func fireConcurrently(t *testing.T, n int, session, body string, bases ...string) []string {
	t.Helper()
	actions := make([]string, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, bases[i%len(bases)]+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-ID", session)
			resp, err := concurrentClient.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			actions[i], statuses[i] = resp.Header.Get(proxy.HeaderAction), resp.StatusCode
		}(i)
	}
	close(start)
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusOK {
			t.Errorf("concurrent request %d: status %d", i, s)
		}
	}
	return actions
}

// concurrentClient is shared by fireConcurrently's goroutines; its idle
// connections are closed by the test that uses it.
var concurrentClient = &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 32}}

// TestRedisConcurrentNoLostUpdates: identical requests of one session sent
// to both replicas at once are one step of the ladder, recorded once; the
// next step still escalates by exactly one rung.
func TestRedisConcurrentNoLostUpdates(t *testing.T) {
	t.Cleanup(concurrentClient.CloseIdleConnections)
	rs := redistest.Start(t)
	fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
	reps := startReplicas(t, fake.URL(), rs.URL(0))
	bases := []string{reps[0].URL, reps[1].URL}
	const n = 20

	steps := []struct {
		calls int
		want  policy.Action
		// wantIvs are the interventions recorded after the step.
		wantIvs []policy.Action
	}{
		{3, policy.Warn, []policy.Action{policy.Warn}},
		{4, policy.Constrain, []policy.Action{policy.Warn, policy.Constrain}},
	}
	for _, st := range steps {
		actions := fireConcurrently(t, n, "burst", loopingBody(st.calls, false), bases...)
		for i, a := range actions {
			if a != string(st.want) {
				t.Errorf("%d calls, request %d: action %q; want %q for every copy", st.calls, i, a, st.want)
			}
		}
		s := loadState(t, rs.URL(0), "burst")
		if got := interventionActions(s); len(got) != len(st.wantIvs) || got[len(got)-1] != st.wantIvs[len(st.wantIvs)-1] {
			t.Errorf("%d calls: interventions in redis = %q; want %q", st.calls, got, st.wantIvs)
		}
		if len(s.Patterns) != 1 {
			t.Errorf("%d calls: %d patterns in redis; want 1", st.calls, len(s.Patterns))
		}
		for _, p := range s.Patterns {
			if p.Level != len(st.wantIvs)-1 {
				t.Errorf("%d calls: pattern level %d; want %d", st.calls, p.Level, len(st.wantIvs)-1)
			}
		}
	}
	ex := postRaw(t, reps[1].URL, loopingBody(5, false), map[string]string{"X-Session-ID": "burst"})
	if a := ex.header.Get(proxy.HeaderAction); a != string(policy.Terminate) {
		t.Errorf("after the bursts, 5 calls: action %q; want terminate", a)
	}
	storeFails := 0
	for _, rep := range reps {
		for _, e := range rep.waitEvents(t, 1) {
			if e.StoreFail {
				storeFails++
			}
		}
	}
	if storeFails > 0 {
		t.Errorf("%d requests failed open on the store (update conflicts or timeouts)", storeFails)
	}
}

// TestRedisDownFailsOpen: with the redis server gone, requests still
// succeed and are judged from their history alone.
func TestRedisDownFailsOpen(t *testing.T) {
	rs := redistest.Start(t)
	fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
	reps := startReplicas(t, fake.URL(), rs.URL(0))
	hdr := map[string]string{"X-Session-ID": "down"}

	if a := postRaw(t, reps[0].URL, loopingBody(3, false), hdr).header.Get(proxy.HeaderAction); a != "warn" {
		t.Fatalf("3 calls with redis up: action %q; want warn", a)
	}
	rs.Stop()

	tests := []struct {
		calls int
		want  string
	}{
		{0, "none"},
		{1, "none"},
		// Without the session's ladder every loop gets the first rung.
		{4, "warn"},
		{5, "warn"},
		{6, "warn"},
	}
	for i, tt := range tests {
		body := loopingBody(tt.calls, i%2 == 1)
		start := time.Now()
		ex := postRaw(t, reps[i%2].URL, body, hdr)
		if ex.status != http.StatusOK {
			t.Errorf("%d calls, redis down: status %d: %s", tt.calls, ex.status, ex.body)
		}
		if a := ex.header.Get(proxy.HeaderAction); a != tt.want {
			t.Errorf("%d calls, redis down: action %q; want %q", tt.calls, a, tt.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%d calls, redis down: took %v", tt.calls, d)
		}
	}
	// Every request's event, the one made with redis up too: an event is
	// reported when its answer has ended, maybe after the client read it.
	var evs []chatDone
	for deadline := time.Now().Add(testTimeout); len(evs) < len(tests)+1; evs = append(reps[0].seen(), reps[1].seen()...) {
		if time.Now().After(deadline) {
			t.Fatalf("the replicas reported %d chat requests after %v; want %d", len(evs), testTimeout, len(tests)+1)
		}
		time.Sleep(2 * time.Millisecond)
	}
	failed := 0
	for _, e := range evs {
		if e.StoreFail {
			failed++
		}
	}
	if failed < len(tests) {
		t.Errorf("%d of %d requests with redis down say StoreFailed; want all", failed, len(tests))
	}
	if got := len(fake.Requests()); got != len(tests)+1 {
		t.Errorf("upstream got %d requests; want %d (none terminated)", got, len(tests)+1)
	}
}

// TestRedisReplicasShareBudget: the tokens one replica counts for a
// session spend the budget the other enforces: a session whose requests
// alternate between two replicas is warned and then ended as on one proxy,
// and a fresh session beside it is untouched.
func TestRedisReplicasShareBudget(t *testing.T) {
	rs := redistest.Start(t)
	fake := fakellm.Start(t, fakellm.Script{Loop: true,
		Responses: []fakellm.Response{{Content: "Done.", Usage: fakellm.Usage{PromptTokens: 100, CompletionTokens: 50}}}})
	var reps [2]*lgServer
	for i := range reps {
		reps[i] = startLoopguard(t, fake.URL(), func(c *proxy.Config) {
			c.Policy.Store = policy.StoreRedis
			c.Policy.RedisURL = rs.URL(0)
			c.Policy.StoreTimeout = time.Second
			c.Policy.SessionMaxTokens = 360 // 150 a turn: the third request is past 80 %, the fourth past it all
			c.Admin.Replica = fmt.Sprintf("replica-%d", i)
		})
	}
	body := `{"model":"gpt-4.1","messages":[{"role":"user","content":"Summarise the repository."}]}`
	var got []string
	for n := range 5 {
		ex := postRaw(t, reps[n%2].URL, body, map[string]string{"X-Session-ID": "budget-replicas"})
		if ex.status != http.StatusOK {
			t.Fatalf("request %d: status %d: %s", n+1, ex.status, ex.body)
		}
		got = append(got, ex.header.Get(proxy.HeaderAction))
	}
	if want := "none,none,warn,terminate,terminate"; strings.Join(got, ",") != want {
		t.Fatalf("actions %v; want %s", got, want)
	}
	if s := loadState(t, rs.URL(0), "budget-replicas"); s.Tokens != 450 || s.Turns != 3 {
		t.Errorf("redis state: %d tokens over %d turns; want 450 over 3", s.Tokens, s.Turns)
	}
	if ex := postRaw(t, reps[1].URL, body, map[string]string{"X-Session-ID": "budget-fresh"}); ex.header.Get(proxy.HeaderAction) != "none" {
		t.Errorf("a fresh session: action %q", ex.header.Get(proxy.HeaderAction))
	}
	if n := len(fake.Requests()); n != 4 {
		t.Errorf("the upstream got %d requests; want 3 of the spent session and 1 of the fresh one", n)
	}
}
