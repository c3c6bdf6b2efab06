package policy

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for TTL tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func incr(st *State) error { st.Resets++; return nil }

// sameShardKeys returns n keys that land in one shard of s.
func sameShardKeys(s *MemoryStore, n int) []string {
	var keys []string
	want := s.shard("k0")
	for i := 0; len(keys) < n; i++ {
		k := "k" + strconv.Itoa(i)
		if s.shard(k) == want {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestMemoryStoreLRU(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(2*memShards, time.Hour) // two per shard
	k := sameShardKeys(s, 3)
	for _, key := range k[:2] {
		if _, err := s.Update(ctx, key, incr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Load(ctx, k[0]); err != nil { // k[0] becomes most recently used
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, k[2], incr); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key  string
		want int
	}{{k[0], 1}, {k[1], 0}, {k[2], 1}}
	for _, tt := range tests {
		st, err := s.Load(ctx, tt.key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Resets != tt.want {
			t.Errorf("Load(%s).Resets = %d; want %d", tt.key, st.Resets, tt.want)
		}
	}
	if n := s.Len(); n != 2 {
		t.Errorf("Len = %d; want 2", n)
	}
}

func TestMemoryStoreBound(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(100, time.Hour)
	for i := range 1000 {
		if _, err := s.Update(ctx, "s"+strconv.Itoa(i), incr); err != nil {
			t.Fatal(err)
		}
	}
	// The bound is per shard, rounded up.
	if n, limit := s.Len(), (100+memShards-1)/memShards*memShards; n > limit {
		t.Fatalf("Len = %d after 1000 sessions; want at most %d", n, limit)
	}
}

func TestMemoryStoreTTL(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := NewMemoryStore(0, time.Minute)
	s.now = clk.now
	if _, err := s.Update(ctx, "a", incr); err != nil {
		t.Fatal(err)
	}
	clk.add(59 * time.Second)
	if st, _ := s.Load(ctx, "a"); st.Resets != 1 {
		t.Fatalf("Load before TTL: Resets = %d; want 1", st.Resets)
	}
	if _, err := s.Update(ctx, "a", incr); err != nil { // refreshes the TTL
		t.Fatal(err)
	}
	clk.add(59 * time.Second)
	if st, _ := s.Load(ctx, "a"); st.Resets != 2 {
		t.Fatalf("Load after a refreshing update: Resets = %d; want 2", st.Resets)
	}
	clk.add(time.Minute)
	if st, _ := s.Load(ctx, "a"); st.Resets != 0 {
		t.Fatalf("Load after TTL: Resets = %d; want 0 (expired)", st.Resets)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d; want the expired state dropped", n)
	}
}

func TestMemoryStoreUpdateErrorKeepsState(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(0, 0)
	if _, err := s.Update(ctx, "a", incr); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err := s.Update(ctx, "a", func(st *State) error { st.Resets = 99; return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Update error = %v; want %v", err, boom)
	}
	if st, _ := s.Load(ctx, "a"); st.Resets != 1 {
		t.Fatalf("Resets = %d after a failed update; want 1", st.Resets)
	}
}

func TestMemoryStoreCopies(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(0, 0)
	_, _ = s.Update(ctx, "a", func(st *State) error {
		st.Patterns = map[string]*Pattern{"p": {Level: 1}}
		return nil
	})
	st, _ := s.Load(ctx, "a")
	st.Patterns["p"].Level = 7
	if again, _ := s.Load(ctx, "a"); again.Patterns["p"].Level != 1 {
		t.Fatalf("a loaded state aliases the stored one: level %d; want 1", again.Patterns["p"].Level)
	}
}

func TestMemoryStoreConcurrent(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(0, 0)
	const workers, per, keys = 16, 50, 5
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				if _, err := s.Update(ctx, "k"+strconv.Itoa((w+i)%keys), incr); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for k := range keys {
		st, _ := s.Load(ctx, "k"+strconv.Itoa(k))
		total += st.Resets
	}
	if total != workers*per {
		t.Fatalf("sum of counters = %d; want %d (lost updates)", total, workers*per)
	}
}

func TestMemoryStoreCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := NewMemoryStore(0, 0)
	if _, err := s.Update(ctx, "a", incr); !errors.Is(err, context.Canceled) {
		t.Fatalf("Update with a cancelled context = %v; want context.Canceled", err)
	}
}
