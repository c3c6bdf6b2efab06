package policy

import (
	"container/list"
	"context"
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// memShards spreads sessions over independently locked LRUs so that
// concurrent requests of different sessions rarely wait on each other.
const memShards = 16

// MemoryStore is the default Store: a bounded LRU of states with a TTL,
// local to one process. Expired states are dropped when touched or when they
// reach the LRU's tail, so no goroutine runs in the background and there is
// nothing to close.
type MemoryStore struct {
	seed   maphash.Seed
	ttl    time.Duration
	now    func() time.Time // tests replace it
	shards [memShards]memShard
}

type memShard struct {
	mu    sync.Mutex
	max   int
	lru   list.List // front: most recently used; values are *memEntry
	items map[string]*list.Element
}

type memEntry struct {
	key     string
	state   State
	expires time.Time
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns a store holding at most maxSessions states (at least
// one per shard, so the bound is rounded up to a multiple of 16), each
// forgotten ttl after its last update. Zero values mean the defaults
// (DefaultMaxSessions, DefaultTTL).
func NewMemoryStore(maxSessions int, ttl time.Duration) *MemoryStore {
	if maxSessions <= 0 {
		maxSessions = DefaultMaxSessions
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	s := &MemoryStore{seed: maphash.MakeSeed(), ttl: ttl, now: time.Now}
	per := (maxSessions + memShards - 1) / memShards
	for i := range s.shards {
		s.shards[i].max = per
		s.shards[i].items = make(map[string]*list.Element)
	}
	return s
}

func (s *MemoryStore) shard(key string) *memShard {
	return &s.shards[maphash.String(s.seed, key)%memShards]
}

// Load implements Store.
func (s *MemoryStore) Load(ctx context.Context, key string) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.get(key, s.now())
	if e == nil {
		return State{}, nil
	}
	return e.state.Clone(), nil
}

// Update implements Store. fn runs under the key's shard lock, once.
func (s *MemoryStore) Update(ctx context.Context, key string, fn func(*State) error) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	var st State
	e := sh.get(key, now)
	if e != nil {
		// fn works on a copy so that an error leaves the stored state intact.
		st = e.state.Clone()
	}
	if err := fn(&st); err != nil {
		return State{}, err
	}
	if e == nil {
		// The key outlives the request it may be a substring of.
		key = strings.Clone(key)
		e = &memEntry{key: key}
		sh.items[key] = sh.lru.PushFront(e)
	}
	e.state = st
	e.expires = now.Add(s.ttl)
	sh.evict(now) // after expires is set: the new entry itself is live
	return st.Clone(), nil
}

// Len returns the number of states held, expired ones not yet dropped
// included.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.items)
		sh.mu.Unlock()
	}
	return n
}

// get returns key's live entry and marks it used; it drops an expired one.
func (sh *memShard) get(key string, now time.Time) *memEntry {
	el, ok := sh.items[key]
	if !ok {
		return nil
	}
	e := el.Value.(*memEntry)
	if !now.Before(e.expires) {
		sh.lru.Remove(el)
		delete(sh.items, key)
		return nil
	}
	sh.lru.MoveToFront(el)
	return e
}

// evict drops expired entries from the tail, then the least recently used
// beyond the bound.
func (sh *memShard) evict(now time.Time) {
	for el := sh.lru.Back(); el != nil; el = sh.lru.Back() {
		e := el.Value.(*memEntry)
		if len(sh.items) <= sh.max && now.Before(e.expires) {
			return
		}
		sh.lru.Remove(el)
		delete(sh.items, e.key)
	}
}
