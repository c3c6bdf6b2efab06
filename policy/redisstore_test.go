package policy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopguard/loopguard/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

func newRedisStore(t testing.TB, url string, timeout time.Duration) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(Config{RedisURL: url, TTL: time.Hour, StoreTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRedisStoreRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(0), time.Second)
	ctx := context.Background()
	if st, err := s.Load(ctx, "none"); err != nil || st.Patterns != nil || st.Resets != 0 {
		t.Fatalf("Load(absent) = %+v, %v; want the zero State", st, err)
	}
	want := State{Resets: 3, Patterns: map[string]*Pattern{"p": {Level: 2, Brief: "bash(ls) x3", Active: true}},
		Cuts: []Cut{{Category: "token_degeneration", Offset: 42}}}
	if _, err := s.Update(ctx, "a", func(st *State) error { *st = want.Clone(); return nil }); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Resets != 3 || got.Patterns["p"].Level != 2 || got.Patterns["p"].Brief != "bash(ls) x3" || len(got.Cuts) != 1 {
		t.Fatalf("Load = %+v; want %+v", got, want)
	}
}

// Two replicas on one redis, 50 concurrent updates of one session: every
// increment must land.
func TestRedisStoreNoLostUpdates(t *testing.T) {
	srv := redistest.Start(t)
	// Generous timeout: 50 writers race for one key, each retry is a round trip.
	replicas := []*RedisStore{newRedisStore(t, srv.URL(0), 5*time.Second), newRedisStore(t, srv.URL(0), 5*time.Second)}
	ctx := context.Background()
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := replicas[i%2].Update(ctx, "shared", incr); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	st, err := replicas[0].Load(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if st.Resets != n {
		t.Fatalf("counter = %d after %d concurrent updates; want %d (lost updates)", st.Resets, n, n)
	}
}

func TestRedisStoreTTL(t *testing.T) {
	srv := redistest.Start(t)
	s, err := NewRedisStore(Config{RedisURL: srv.URL(0), TTL: 150 * time.Millisecond, StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Update(ctx, "a", incr); err != nil {
		t.Fatal(err)
	}
	ttl, err := s.client.PTTL(ctx, redisStatePrefix+"a").Result()
	if err != nil || ttl <= 0 || ttl > 150*time.Millisecond {
		t.Fatalf("PTTL = %v, %v; want in (0, 150ms]", ttl, err)
	}
	time.Sleep(300 * time.Millisecond)
	if st, _ := s.Load(ctx, "a"); st.Resets != 0 {
		t.Fatalf("Load after TTL: Resets = %d; want 0", st.Resets)
	}
}

func TestRedisStoreDownFailsFast(t *testing.T) {
	// A port nobody listens on: the server is down.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := newRedisStore(t, "redis://"+addr+"/0", 50*time.Millisecond)
	start := time.Now()
	if _, err := s.Update(context.Background(), "a", incr); err == nil {
		t.Fatal("Update with redis down succeeded; want an error")
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("Update with redis down took %v; want it bounded by the 50ms timeout", el)
	}
}

func TestRedisStoreSlowFailsFast(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(0), 50*time.Millisecond)
	ctx := context.Background()
	if _, err := s.Update(ctx, "a", incr); err != nil { // warm a pooled connection
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	for _, op := range []struct {
		name string
		fn   func() error
	}{
		{"Update", func() error { _, err := s.Update(ctx, "a", incr); return err }},
		{"Load", func() error { _, err := s.Load(ctx, "a"); return err }},
	} {
		start := time.Now()
		if err := op.fn(); err == nil {
			t.Fatalf("%s with redis stalled succeeded; want a timeout", op.name)
		}
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Fatalf("%s with redis stalled took %v; want it bounded by the 50ms timeout", op.name, el)
		}
	}
}

func TestPolicyFailsOpenOnRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(0), 50*time.Millisecond)
	p := New(DefaultConfig(), s, zerolog.Nop())
	srv.Stop()
	r := loopReq(3, true)
	d, err := p.Decide(context.Background(), "s", r.verdict(), r.trajectory(), ModeEnforce)
	if err != nil || !d.StoreFailed || d.Action != Warn {
		t.Fatalf("Decide with redis down = %s, StoreFailed %v, err %v; want warn, true, nil", d.Action, d.StoreFailed, err)
	}
}

// Two replicas share the ladder through redis.
func TestRedisLadderAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a := New(DefaultConfig(), newRedisStore(t, srv.URL(0), time.Second), zerolog.Nop())
	b := New(DefaultConfig(), newRedisStore(t, srv.URL(0), time.Second), zerolog.Nop())
	ctx := context.Background()
	want := []Action{Warn, Constrain, Terminate}
	for i, p := range []*Policy{a, b, a} {
		r := loopReq(3+i, true)
		d, err := p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
		if err != nil {
			t.Fatal(err)
		}
		if d.Action != want[i] {
			t.Fatalf("request %d on replica %d: Action = %s; want %s", i, i%2, d.Action, want[i])
		}
	}
}

func TestGlobalDoomLoop(t *testing.T) {
	srv := redistest.Start(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := zerolog.New(syncWriter{&mu, &logs})
	cfg := DefaultConfig()
	cfg.GlobalSessions = 3
	a := New(cfg, newRedisStore(t, srv.URL(0), time.Second), logger)
	b := New(cfg, newRedisStore(t, srv.URL(0), time.Second), logger)
	ctx := context.Background()
	r := loopReq(3, true)
	for i, wantCross := range []bool{false, false, true, true} {
		p := []*Policy{a, b}[i%2]
		d, err := p.Decide(ctx, "session-"+strconv.Itoa(i), r.verdict(), r.trajectory(), ModeEnforce)
		if err != nil {
			t.Fatal(err)
		}
		if d.CrossSession != wantCross || d.GlobalSessions != i+1 {
			t.Fatalf("session %d: CrossSession %v, GlobalSessions %d; want %v, %d", i, d.CrossSession, d.GlobalSessions, wantCross, i+1)
		}
		if wantIncident := i == 2; d.Incident != wantIncident {
			t.Errorf("session %d: Incident %v; want %v (one incident per window)", i, d.Incident, wantIncident)
		}
	}
	// The same session again does not count twice.
	d, _ := a.Decide(ctx, "session-0", r.verdict(), r.trajectory(), ModeEnforce)
	if d.GlobalSessions != 4 {
		t.Fatalf("GlobalSessions = %d after a repeat; want 4 distinct sessions", d.GlobalSessions)
	}
	// Another pattern has its own count.
	other := req{steps: 3, loop: true, last: 2, count: 3, key: "p2"}
	if d, _ := b.Decide(ctx, "session-0", other.verdict(), other.trajectory(), ModeEnforce); d.CrossSession || d.GlobalSessions != 1 {
		t.Fatalf("other pattern: CrossSession %v, GlobalSessions %d; want false, 1", d.CrossSession, d.GlobalSessions)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "global loop incident"); n != 1 {
		t.Fatalf("incident logged %d times; want once per window:\n%s", n, logs.String())
	}
}

func TestGlobalWindowExpires(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(0), time.Second)
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 3 {
		if _, _, err := s.RecordPattern(ctx, "p", "s"+strconv.Itoa(i), t0, time.Minute, 3); err != nil {
			t.Fatal(err)
		}
	}
	n, incident, err := s.RecordPattern(ctx, "p", "late", t0.Add(2*time.Minute), time.Minute, 3)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || incident {
		t.Fatalf("RecordPattern after the window = %d, %v; want 1, false (old sessions dropped)", n, incident)
	}
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A password-protected server is reached with the password from the
// variable redis_password_env names, not from the URL or the file.
func TestRedisStorePasswordFromEnv(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret-from-env")
	const env = "LOOPGUARD_TEST_REDIS_PASSWORD"
	tests := []struct {
		name     string
		password string // the variable's value; "" leaves it unset
		wantErr  string // from NewRedisStore
		wantOK   bool   // Update succeeds
	}{
		{name: "from env", password: "s3cret-from-env", wantOK: true},
		{name: "wrong password", password: "nope"},
		{name: "variable unset", wantErr: env},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(env, tt.password)
			s, err := NewRedisStore(Config{RedisURL: srv.URL(0), RedisPasswordEnv: env, StoreTimeout: time.Second})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewRedisStore = %v; want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = s.Update(context.Background(), "pw", incr)
			if (err == nil) != tt.wantOK {
				t.Fatalf("Update = %v; want success %v", err, tt.wantOK)
			}
		})
	}
	// Without the password the server refuses: the test above is not
	// passing because the server ignores AUTH.
	s := newRedisStore(t, srv.URL(0), time.Second)
	if _, err := s.Update(context.Background(), "pw", incr); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("Update without a password = %v; want NOAUTH", err)
	}
}

// The deployment shapes: one server, TLS, a Redis Cluster named by several
// nodes, Sentinels naming a master. No server is dialled.
func TestNewRedisStoreClientKind(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    string
		addr    string // a single server's address
		wantTLS bool
	}{
		{name: "one server", cfg: Config{RedisURL: "redis://10.0.0.1:6379/2"}, want: "*redis.Client", addr: "10.0.0.1:6379"},
		{name: "tls", cfg: Config{RedisURL: "rediss://user:pw@redis.example:6380/0"}, want: "*redis.Client", addr: "redis.example:6380", wantTLS: true},
		{name: "cluster", cfg: Config{RedisURL: "redis://10.0.0.1:7000", RedisAddrs: []string{"10.0.0.2:7000", "10.0.0.3:7000"}},
			want: "*redis.ClusterClient"},
		{name: "cluster over tls", cfg: Config{RedisURL: "rediss://10.0.0.1:7000", RedisAddrs: []string{"10.0.0.2:7000"}},
			want: "*redis.ClusterClient", wantTLS: true},
		{name: "sentinel", cfg: Config{RedisURL: "redis://10.0.0.1:26379/1", RedisAddrs: []string{"10.0.0.2:26379"}, RedisMaster: "mymaster"},
			want: "*redis.Client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewRedisStore(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := fmt.Sprintf("%T", s.client); got != tt.want {
				t.Fatalf("client %s; want %s", got, tt.want)
			}
			var tlsOn bool
			switch c := s.client.(type) {
			case *redis.ClusterClient:
				o := c.Options()
				tlsOn = o.TLSConfig != nil
				if len(o.Addrs) != 1+len(tt.cfg.RedisAddrs) {
					t.Errorf("cluster seeds %q; want the URL's host and %q", o.Addrs, tt.cfg.RedisAddrs)
				}
			case *redis.Client:
				o := c.Options()
				tlsOn = o.TLSConfig != nil
				if tt.cfg.RedisMaster != "" && !strings.HasPrefix(o.Addr, "FailoverClient") {
					t.Errorf("Addr %q; want a failover client that asks the Sentinels", o.Addr)
				}
				if tt.addr != "" && o.Addr != tt.addr {
					t.Errorf("Addr %q; want the URL's host %q", o.Addr, tt.addr)
				}
			}
			if tlsOn != tt.wantTLS {
				t.Errorf("TLS %v; want %v", tlsOn, tt.wantTLS)
			}
		})
	}
}

// The shared admin feed stays bounded in redis: capped near RedisFeedLen
// entries and expiring with the store's TTL; Read resumes after an id.
func TestRedisFeedBounded(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedisStore(t, srv.URL(0), 5*time.Second)
	ctx := context.Background()
	batch := make([][]byte, 1000)
	for i := range batch {
		batch[i] = []byte(`{"kind":"request","session":"s` + strconv.Itoa(i) + `"}`)
	}
	for range RedisFeedLen/len(batch) + 3 {
		if err := s.Publish(ctx, "origin-1", batch); err != nil {
			t.Fatal(err)
		}
	}
	// MAXLEN ~ trims whole stream nodes (100 entries each by default).
	if n := s.client.XLen(ctx, redisFeedKey).Val(); n < RedisFeedLen || n > RedisFeedLen+200 {
		t.Errorf("feed holds %d entries after %d published; want about %d", n, (RedisFeedLen/len(batch)+3)*len(batch), RedisFeedLen)
	}
	if ttl := s.client.PTTL(ctx, redisFeedKey).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("feed PTTL = %v; want the store's TTL (1h)", ttl)
	}
	first, err := s.Read(ctx, "", 2)
	if err != nil || len(first) != 2 || first[0].Origin != "origin-1" {
		t.Fatalf("Read(oldest) = %+v, %v; want 2 entries of origin-1", first, err)
	}
	next, err := s.Read(ctx, first[0].ID, 1)
	if err != nil || len(next) != 1 || next[0].ID != first[1].ID || string(next[0].Data) != string(first[1].Data) {
		t.Fatalf("Read after %s = %+v, %v; want the entry after it", first[0].ID, next, err)
	}
}
