package inspect

import (
	"container/list"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/loopguard/loopguard/internal/rawjson"
)

// SessionCache keeps, per session, what parsing the session's last request
// built: its steps and the parser's state after its last message, with a
// hash of each message's raw bytes. An agent sends its whole history on
// every turn; a request whose history begins with exactly the messages
// cached (every hash matches) is parsed from the first new message on.
// Any other request (history edited, compacted or cut, another replica
// answered the last turn, loopguard rewrote it) is parsed in full, so a
// Trajectory never depends on the cache: ParseSession returns what
// ParseAPI returns for the same body.
//
// The cache is a local LRU bounded by a memory budget. It is safe for
// concurrent use.
type SessionCache struct {
	seed   maphash.Seed
	budget int64
	hits   atomic.Uint64
	misses atomic.Uint64

	mu      sync.Mutex
	bytes   int64
	entries map[string]*list.Element // of *cacheEntry
	lru     list.List                // most recently used first
}

// CacheStats is a snapshot of a SessionCache's counters.
type CacheStats struct {
	Hits     uint64 // requests parsed from a cached prefix
	Misses   uint64 // requests of a session parsed in full
	Bytes    int64  // memory the cached sessions hold (estimated)
	Sessions int
}

// NewSessionCache returns a cache holding at most budget bytes; nil when
// budget is not positive (ParseSession then always parses in full).
func NewSessionCache(budget int64) *SessionCache {
	if budget <= 0 {
		return nil
	}
	return &SessionCache{seed: maphash.MakeSeed(), budget: budget, entries: map[string]*list.Element{}}
}

// Stats returns the cache's counters; the zero CacheStats for a nil cache.
func (c *SessionCache) Stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Bytes: c.bytes, Sessions: len(c.entries)}
}

// cacheEntry is one session's parse state after its last request's
// messages. Its steps are never written again: a request resuming from it
// copies the steps that parsing on may change (see parser.resume).
type cacheEntry struct {
	key    string
	api    API
	meta   []string
	hashes []uint64 // of each message's raw bytes, in order
	steps  []Step
	start  int
	calls  int // calls in steps, for the size
	// The parser's state between messages.
	lastAssistant, open bool
	// held is the arena memory the steps' strings keep alive.
	held  int
	bytes int64
}

var (
	stepSize = int64(unsafe.Sizeof(Step{}))
	callSize = int64(unsafe.Sizeof(Call{}))
)

// entryOverhead approximates the key, list element and map slot of an entry.
const entryOverhead = 256

func (en *cacheEntry) size() int64 {
	return int64(en.held) + int64(cap(en.steps))*stepSize + int64(en.calls)*callSize + int64(cap(en.hashes))*8 + int64(len(en.key)) + entryOverhead
}

// ParseSession is ParseAPI for a request of the given session, resuming
// from what the session's previous request left in c when the history
// extends it, and leaving this request's state there for the next one. A
// nil c or an empty session parses in full, as ParseAPI.
func (e *Engine) ParseSession(c *SessionCache, session string, api API, body []byte) (*Trajectory, error) {
	meta := e.cfg.MetadataArgs
	if meta == nil {
		meta = defaultMetadataArgs
	}
	if c == nil || session == "" {
		return parseAPI(api, body, meta)
	}
	walk, ok := adapters[api]
	if !ok {
		api, walk = ChatCompletions, (*parser).chat
	}
	sp := &sessionParse{seed: c.seed}
	if prev := c.get(session); prev != nil && prev.api == api && slices.Equal(prev.meta, meta) {
		sp.prev = prev
	}
	t, err := parseBody(body, meta, walk, sp)
	if err != nil || sp.done == nil {
		return t, err
	}
	if sp.resumed {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	en := sp.done
	en.key, en.api, en.meta = session, api, meta
	c.put(en)
	return t, nil
}

func (c *SessionCache) get(key string) *cacheEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.entries[key]
	if el == nil {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cacheEntry)
}

// put stores en as its session's state, evicting the least recently used
// sessions beyond the budget. An entry larger than the whole budget is
// not kept.
func (c *SessionCache) put(en *cacheEntry) {
	en.bytes = en.size()
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.entries[en.key]; el != nil {
		c.bytes -= el.Value.(*cacheEntry).bytes
		c.lru.Remove(el)
		delete(c.entries, en.key)
	}
	if en.bytes > c.budget {
		return
	}
	c.entries[en.key] = c.lru.PushFront(en)
	c.bytes += en.bytes
	for c.bytes > c.budget {
		old := c.lru.Back().Value.(*cacheEntry)
		c.lru.Remove(c.lru.Back())
		delete(c.entries, old.key)
		c.bytes -= old.bytes
	}
}

// sessionParse is one cached parse: the entry it may resume from, and the
// entry it leaves.
type sessionParse struct {
	seed    maphash.Seed
	prev    *cacheEntry // nil: parse in full
	resumed bool        // the history began with prev's messages
	hashes  []uint64
	base    int // steps taken over from prev
	held    int // arena memory of those steps' strings
	calls   int // calls in those steps
	done    *cacheEntry
}

// lookBack is how many steps before the last a message can still change:
// a result is paired with a call of the latest 64 steps (findCall), and
// the last step takes user-role tool output and further items.
const lookBack = 64

// resume returns where the walk of the history array arr begins and the
// index of the message there. When the session's cached messages are the
// first ones of arr, byte for byte, it restores the parser's state after
// them and returns the position of the next one (last is where the last
// of them starts and ends); otherwise the first message. It also sizes the
// arena for what is left to read. Adapters call it before anything is
// written to the arena or the steps.
func (p *parser) resume(arr string) (at, idx int, last [2]int) {
	sp := p.sess
	if sp == nil {
		return rawjson.SkipSpace(arr, 1), 0, last
	}
	if sp.prev != nil {
		if at, last, ok := sp.matchPrefix(arr); ok {
			p.restore(sp.prev)
			p.ar = newArena(len(arr) - at + 1024)
			return at, len(sp.prev.hashes), last
		}
		sp.prev = nil
	}
	p.ar = newArena(len(p.src) + 1024)
	return rawjson.SkipSpace(arr, 1), 0, last
}

// matchPrefix reports whether arr begins with the messages whose hashes
// prev holds, where the next element begins and where the last of them
// starts and ends.
func (sp *sessionParse) matchPrefix(arr string) (at int, last [2]int, ok bool) {
	hs := sp.prev.hashes
	i := rawjson.SkipSpace(arr, 1)
	for n := 0; n < len(hs); n++ {
		if i < len(arr) && arr[i] == ',' {
			i = rawjson.SkipSpace(arr, i+1)
		}
		if i >= len(arr) || arr[i] == ']' {
			return 0, last, false
		}
		e := rawjson.ValueEnd(arr, i)
		if maphash.String(sp.seed, arr[i:e]) != hs[n] {
			return 0, last, false
		}
		last = [2]int{i, e}
		i = rawjson.SkipSpace(arr, e)
	}
	return i, last, true
}

// restore takes over prev's steps and state. The steps are copied, and the
// calls of the last lookBack steps too, into memory of this parse's own:
// pairing a result, or adding to the last step, writes there, and prev is
// shared with other requests of the session.
func (p *parser) restore(prev *cacheEntry) {
	sp := p.sess
	sp.resumed = true
	sp.base, sp.held, sp.calls = len(prev.steps), prev.held, prev.calls
	sp.hashes = make([]uint64, len(prev.hashes), len(prev.hashes)+16)
	copy(sp.hashes, prev.hashes)
	steps := make([]Step, len(prev.steps), len(prev.steps)+16)
	copy(steps, prev.steps)
	from := max(0, len(steps)-lookBack)
	n := 0
	for s := from; s < len(steps); s++ {
		n += len(steps[s].Calls)
	}
	if n > 0 {
		calls := make([]Call, n)
		k := 0
		for s := from; s < len(steps); s++ {
			src := steps[s].Calls
			if len(src) == 0 {
				continue // nil stays nil
			}
			for i := range src {
				src[i].copyTo(&calls[k+i])
			}
			steps[s].Calls = calls[k : k+len(src) : k+len(src)]
			k += len(src)
		}
	}
	p.t.Steps = steps
	p.t.Start = prev.start
	p.lastAssistant, p.open = prev.lastAssistant, prev.open
}

// note records the raw bytes of the next message for the next request's
// prefix check.
func (p *parser) note(raw string) {
	if p.sess != nil {
		p.sess.hashes = append(p.sess.hashes, maphash.String(p.sess.seed, raw))
	}
}

// finish builds the entry a successful walk leaves in the cache.
func (sp *sessionParse) finish(p *parser) {
	t := p.t
	calls := sp.calls
	for s := sp.base; s < len(t.Steps); s++ {
		calls += len(t.Steps[s].Calls)
	}
	sp.done = &cacheEntry{
		hashes:        sp.hashes,
		steps:         slices.Clip(t.Steps),
		start:         t.Start,
		calls:         calls,
		lastAssistant: p.lastAssistant,
		open:          p.open,
		held:          sp.held + p.ar.held,
	}
}

// copyTo copies c to dst field by field: c may be in a Trajectory being
// inspected, whose result fingerprint is written atomically meanwhile.
func (c *Call) copyTo(dst *Call) {
	*dst = Call{
		ID: c.ID, Name: c.Name, Args: c.Args, Primary: c.Primary,
		Fingerprint: c.Fingerprint, PrimaryFingerprint: c.PrimaryFingerprint,
		HasResult: c.HasResult, Result: c.Result, ResultMessage: c.ResultMessage,
		resultFP: atomic.LoadUint64(&c.resultFP),
		IsError:  c.IsError, ErrorSignature: c.ErrorSignature, ErrorText: c.ErrorText,
	}
}
