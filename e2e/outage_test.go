package e2e

import (
	"bufio"
	"net"
	"net/http"
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

// scrape reads base's /metrics and calls fn with each line.
func scrape(t *testing.T, base string, fn func(line string)) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fn(sc.Text())
	}
}

// metricValue reads one series (name with labels, as exposed) from base's
// /metrics; 0 when it is absent.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	var f float64
	scrape(t, base, func(line string) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var err error
			if f, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				t.Errorf("%s: %v", series, err)
			}
		}
	})
	return f
}

const storeFailOpen = `loopguard_fail_open_total{stage="store"}`

// TestRedisOutageHeals: redis goes away in the middle of a looping agent's
// run and comes back on the same port with what it had persisted. While it
// is away every turn reaches the upstream and the agent sees no error (the
// turns count as store fail-opens); once it is back the ladder goes on from
// the level redis kept, with the same loopguard processes.
func TestRedisOutageHeals(t *testing.T) {
	// The append-only file keeps every acknowledged write across the kill.
	rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
	reps := startReplicas(t, fake.URL(), rs.URL(0))
	hdr := map[string]string{"X-Session-ID": "outage"}
	turn := func(calls int) (rawExchange, time.Duration) {
		start := time.Now()
		ex := postRaw(t, reps[calls%2].URL, loopingBody(calls, false), hdr)
		return ex, time.Since(start)
	}

	for _, step := range []struct {
		calls int
		want  string
	}{{3, "warn"}, {4, "constrain"}} {
		if ex, _ := turn(step.calls); ex.header.Get(proxy.HeaderAction) != step.want {
			t.Fatalf("%d calls, redis up: action %q; want %q", step.calls, ex.header.Get(proxy.HeaderAction), step.want)
		}
	}
	before := metricValue(t, reps[0].URL, storeFailOpen) + metricValue(t, reps[1].URL, storeFailOpen)
	upstreamBefore := len(fake.Requests())

	rs.Stop()
	const down = 4
	var slowest time.Duration
	for i := range down {
		ex, d := turn(5 + i%2)
		slowest = max(slowest, d)
		if ex.status != http.StatusOK || strings.Contains(string(ex.body), `"error"`) {
			t.Errorf("turn %d with redis down: status %d: %s", i, ex.status, ex.body)
		}
		// Without the session's ladder the loop gets the first rung, as for
		// a fresh session (docs/design.md section 7: a failed store
		// decides from the history alone); never terminate.
		if a := ex.header.Get(proxy.HeaderAction); a == string(policy.Terminate) {
			t.Errorf("turn %d with redis down: action %q; the turn must reach the upstream", i, a)
		}
	}
	after := metricValue(t, reps[0].URL, storeFailOpen) + metricValue(t, reps[1].URL, storeFailOpen)
	if after-before != down {
		t.Errorf("%s grew by %v over %d turns with redis down; want %d", storeFailOpen, after-before, down, down)
	}
	if got := len(fake.Requests()) - upstreamBefore; got != down {
		t.Errorf("upstream got %d of the %d turns made with redis down", got, down)
	}

	restarted := time.Now()
	rs.Restart(t)
	// The level redis kept is constrain: the loop going on is terminated,
	// on whichever replica the turn lands.
	for i := range 2 {
		ex, _ := turn(5 + i)
		if a := ex.header.Get(proxy.HeaderAction); a != string(policy.Terminate) {
			t.Fatalf("turn %d after redis came back: action %q; want terminate (the ladder resumes from constrain)", i, a)
		}
	}
	healed := time.Since(restarted)
	if n := metricValue(t, reps[0].URL, storeFailOpen) + metricValue(t, reps[1].URL, storeFailOpen); n != after {
		t.Errorf("%s grew by %v after redis came back; want no more store fail-opens", storeFailOpen, n-after)
	}
	t.Logf("redis down: slowest of %d turns %v; back up: first two turns done %v after the restart began", down, slowest, healed)
}

// delayProxy forwards TCP connections to target, holding every chunk of
// bytes for delay in each direction: a redis that answers, slowly.
type delayProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startDelayProxy(t *testing.T, target string, delay time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Go(func() { copyDelayed(up, c, delay) })
			p.wg.Go(func() { copyDelayed(c, up, delay) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func copyDelayed(dst, src net.Conn, delay time.Duration) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			time.Sleep(delay)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestRedisSlowBoundsLatency: a redis whose every answer comes later than
// store_timeout costs the agent at most the store's bound, never the
// redis delay: the turn fails open and goes on.
func TestRedisSlowBoundsLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("times turns through a deliberately slow Redis: skipped under -short")
	}
	rs := redistest.Start(t)
	const (
		storeTimeout = 100 * time.Millisecond
		redisDelay   = 2 * time.Second
	)
	slow := startDelayProxy(t, rs.Addr, redisDelay)
	fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
	lg := startLoopguard(t, fake.URL(), func(c *proxy.Config) {
		c.Policy.Store = policy.StoreRedis
		c.Policy.RedisURL = "redis://" + slow.addr() + "/0"
		c.Policy.StoreTimeout = storeTimeout
	})
	direct := startLoopguard(t, fake.URL(), nil) // memory store: the same work without redis
	hdr := map[string]string{"X-Session-ID": "slow"}
	// The proxy bounds one request's store work (several calls) by four
	// store timeouts; that is the most redis may add.
	bound := 4 * storeTimeout
	for calls := range 5 {
		body := loopingBody(calls, false)
		t0 := time.Now()
		base := postRaw(t, direct.URL, body, hdr)
		baseline := time.Since(t0)
		t1 := time.Now()
		ex := postRaw(t, lg.URL, body, hdr)
		took := time.Since(t1)
		if ex.status != http.StatusOK || base.status != http.StatusOK {
			t.Fatalf("%d calls: status %d (memory store %d): %s", calls, ex.status, base.status, ex.body)
		}
		// Generous slack for a loaded 2-core machine under -race, still far
		// below the redis delay.
		if added := took - baseline; added > bound+300*time.Millisecond {
			t.Errorf("%d calls: slow redis added %v to the turn; want at most %v (+ slack)", calls, added, bound)
		}
		t.Logf("%d calls: %v through the slow redis, %v with the memory store", calls, took, baseline)
	}
	evs := lg.waitEvents(t, 5)
	for i, e := range evs {
		if !e.StoreFail {
			t.Errorf("turn %d: the store did not time out; the test did not exercise a slow redis", i)
		}
	}
}
