package inspect

import (
	"container/list"
	"crypto/rand"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/zeebo/xxh3"
)

// SessionCache keeps, per session, what parsing the session's last request
// built: its steps and the parser's state after its last message, with a
// hash of the raw bytes of its history array up to the end of that
// message. An agent sends its whole history on every turn; a request whose
// history array begins with exactly those bytes (the hash matches) is
// parsed from the first new message on, and only what is not those bytes
// is validated (they were as JSON last time). Any other request (history
// edited, compacted or cut, another replica answered the last turn,
// loopguard rewrote it) is parsed in full, so a verdict never depends on
// the cache: ParseSession returns what ParseAPI returns for the same body,
// but for what no rule of its engine reads (see compact): the text of the
// tool results, each replaced by a digest of what the rules read of it
// (none before the detectors' reach, and no evidence text where no rule
// can report it: evidenceZone). Tool output is most of
// a history: the cache holds a fraction of it, most of it the steps' Step
// and Call structs.
//
// A turn resuming from its session's entry adds the new steps to the
// cached ones in place when nothing else reads them: the trajectory the
// previous turn returned was released (Trajectory.Release) and no other
// request of the session is reading the entry (see lease). Else it copies
// them, and a request that finds the entry being extended parses in full.
//
// The cache is a local LRU bounded by a memory budget. It is safe for
// concurrent use.
type SessionCache struct {
	seed   uint64 // of the prefix hashes, random: histories are the clients'
	budget int64
	hits   atomic.Uint64
	misses atomic.Uint64

	mu      sync.Mutex
	bytes   int64
	entries map[string]*list.Element // of *cacheEntry
	lru     list.List                // most recently used first
}

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
	var seed [8]byte
	rand.Read(seed[:]) // never fails (crypto/rand)
	return &SessionCache{seed: binary.LittleEndian.Uint64(seed[:]), budget: budget, entries: map[string]*list.Element{}}
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
// messages. A request resuming from it leases it (see SessionCache.lease):
// when nothing else reads its steps, the request takes it out of the cache
// and extends its steps in place; else it copies them. The calls of its
// steps are never written again: both copy those that parsing on may
// change (see parser.restore).
type cacheEntry struct {
	cache *SessionCache
	key   string
	api   API
	// The history array's first prefix bytes, from its '[' to the end of
	// its last message (message n-1), hash to sum.
	n, prefix int
	sum       uint64
	last      [2]int // the last message's offsets in the array
	steps     []Step // with room for the next turns' (roomFor)
	start     int
	churn     churnMarks
	calls     int // calls in steps, for the size
	// The parser's state between messages.
	lastAssistant, open bool
	// unanswered are the steps a result may still pair with.
	unanswered unansweredSteps
	// engine made the entry; from is its reach (Engine.reach), and
	// counted the calls it counts from step from on.
	engine        *Engine
	from, counted int
	// held is the memory the steps' strings and digests keep alive.
	held  int
	bytes int64
	// readers counts the trajectories (the one the entry was made for,
	// until Trajectory.Release) and the parses copying its steps; leased
	// is set when a parse took it to write. Both are guarded by cache.mu.
	readers int
	leased  bool
}

var (
	stepSize = int64(unsafe.Sizeof(Step{}))
	callSize = int64(unsafe.Sizeof(Call{}))
)

// entryOverhead approximates the key, list element and map slot of an entry.
const entryOverhead = 512

func (en *cacheEntry) size() int64 {
	return int64(en.held) + int64(cap(en.steps))*stepSize + int64(en.calls)*callSize + int64(len(en.key)) + entryOverhead
}

// ParseSession is ParseAPI for a request of the given session, resuming
// from what the session's previous request left in c when the history
// extends it, and leaving this request's state there for the next one. A
// nil c or an empty session parses in full, as ParseAPI. The Trajectory
// is for e's Inspect: its results are digests (see SessionCache).
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
		api, walk = wireapi.Chat, (*parser).chat
	}
	// Results are digested unless a rule reads all their text (an error
	// pattern of the configuration). A digest is of the engine's rules:
	// another engine (a new configuration) parses in full.
	sp := &sessionParse{hash: prefixHash{chain: c.seed}, engine: e, digest: len(e.patterns) == 0}
	// The engine's MetadataArgs made the entry's fingerprints: another
	// engine's entry is parsed in full.
	if prev := c.get(session); prev != nil && prev.api == api && prev.engine == e {
		sp.locate(body, api, prev)
	}
	t, err := parseBody(body, meta, walk, sp)
	if sp.reading != nil {
		c.unlease(sp.reading)
	}
	if err != nil || sp.done == nil {
		return t, err
	}
	if sp.prev != nil {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	en := sp.done
	en.cache, en.key, en.api = c, session, api
	en.readers, t.lease = 1, en // t's steps are en's until t.Release
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

// lease lets a parse resume from en, which it got from get: it returns
// own when the parse may write en's steps, having taken en out of the
// cache (no trajectory or other parse reads them); else, when en is not
// leased, it counts the parse as a reader until unlease, and the parse
// copies the steps. ok is false when another parse leased en meanwhile:
// it is being written, and the parse reads the body in full.
func (c *SessionCache) lease(en *cacheEntry) (own, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch el := c.entries[en.key]; {
	case en.leased:
		return false, false
	case en.readers == 0 && el != nil && el.Value == en:
		en.leased = true
		c.remove(el)
		return true, true
	}
	en.readers++
	return false, true
}

// unlease ends a read of en's steps (a copy, or a trajectory).
func (c *SessionCache) unlease(en *cacheEntry) {
	c.mu.Lock()
	en.readers--
	c.mu.Unlock()
}

// remove drops the entry of el; c.mu is held.
func (c *SessionCache) remove(el *list.Element) {
	en := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.entries, en.key)
	c.bytes -= en.bytes
}

// put stores en as its session's state, evicting the least recently used
// sessions beyond the budget. An entry larger than the whole budget is
// not kept.
func (c *SessionCache) put(en *cacheEntry) {
	en.bytes = en.size()
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.entries[en.key]; el != nil {
		c.remove(el)
	}
	if en.bytes > c.budget {
		return
	}
	c.entries[en.key] = c.lru.PushFront(en)
	c.bytes += en.bytes
	for c.bytes > c.budget {
		c.remove(c.lru.Back())
	}
}

// lookBack is how many steps before the last a message can still change:
// a result is paired with a call of the latest 64 steps (findCall), and
// the last step takes user-role tool output and further items.
const lookBack = 64

// stepsRoom is the room a resumed parse leaves for new steps after the
// restored ones: a turn adds one or two, and the cache keeps what is left.
const stepsRoom = 4

// roomFor is the room for new steps an entry of n steps may keep: its
// steps grow in place (see SessionCache.lease), and this room makes
// copying them on growth cost a few steps a turn.
func roomFor(n int) int { return stepsRoom + n/32 }

// sessionParse is one cached parse: the entry it resumes from, if any,
// and the entry it leaves.
type sessionParse struct {
	prev *cacheEntry // the history extends it; nil: parse in full
	// reading is prev while this parse reads its steps as one of its
	// readers (it copied them, and compares with them until the parse
	// ends: priorSteps.copied): no other parse may lease prev and write
	// them meanwhile.
	reading *cacheEntry
	// hist and model are the body's history array and model, found by
	// locate when prev is set.
	hist, model string
	// hash has read the history array's full blocks of those locate
	// checked; region ends after message n-1 (last).
	hash      prefixHash
	region, n int
	last      [2]int
	arr       int // the history array's offset in the body
	base      int // steps taken over from prev
	held      int // memory of those steps' strings
	calls     int // calls in those steps
	// prior is what the steps taken over were before this parse.
	prior  priorSteps
	saved  [2]savedStep // prior.saved's first
	engine *Engine
	digest bool
	done   *cacheEntry
}

// historyKey is the member of a body of api that holds its history.
func historyKey(api API) string {
	if a := wireapi.Lookup(api); a != nil {
		return a.History
	}
	return "messages"
}

// locate sets sp.prev to prev when the body's history array begins with
// prev's bytes. It reads the top-level members as historyAndModel does,
// without scanning those bytes for where values end: it hashes them
// instead, then walks the rest of the array. The body is not validated
// yet: an invalid one is found out by validSkipping, and the parse that
// follows recovers from anything.
func (sp *sessionParse) locate(body []byte, api API, prev *cacheEntry) {
	// The body is not validated yet: should a malformed one trip the walk,
	// it is parsed in full, which reports it.
	defer func() {
		if recover() != nil {
			sp.prev = nil
		}
	}()
	src := rawjson.View(body)
	i := rawjson.SkipSpace(src, 0)
	if i >= len(src) || src[i] != '{' {
		return
	}
	key := historyKey(api)
	var hist, model string
	h := sp.hash
	membersWith(src, i, func(k string, at int) int {
		if !rawKeyIs(k, key) {
			e := rawjson.ValueEnd(src, at)
			if rawKeyIs(k, "model") {
				model = src[at:e]
			}
			return e
		}
		if at >= len(src) || src[at] != '[' || len(src)-at < prev.prefix {
			hist = "-" // not the cached history: ends the walk below
			return len(src)
		}
		var sum uint64
		h, sum = sp.hash.extend(src[at : at+prev.prefix])
		if sum != prev.sum {
			hist = "-"
			return len(src)
		}
		e := rawjson.CloseEnd(src, at+prev.prefix, 1)
		hist = src[at:e]
		return e
	})
	// A second history member wins (as in historyAndModel) if it has the
	// cached bytes too; any other ends the walk unresumed.
	if hist == "" || hist == "-" {
		return
	}
	sp.prev, sp.hist, sp.model, sp.hash = prev, hist, model, h
}

// validSkipping reports whether body is valid JSON, given that the cached
// prefix of its history array (sp.prev) is: that prefix was an array's
// opening and whole values then, so the body is valid exactly when it is
// with the prefix replaced by "[0". Only the rest is read.
func (sp *sessionParse) validSkipping(body []byte) bool {
	off := int(uintptr(unsafe.Pointer(unsafe.StringData(sp.hist))) - uintptr(unsafe.Pointer(unsafe.SliceData(body))))
	bp := validBufs.Get().(*[]byte)
	b := append(append(append((*bp)[:0], body[:off]...), "[0"...), body[off+sp.prev.prefix:]...)
	ok := rawjson.Valid(b)
	if cap(b) <= maxPooledScratch {
		*bp = b
		validBufs.Put(bp)
	}
	return ok
}

var validBufs = sync.Pool{New: func() any { return new([]byte) }}

// history returns the body's history array and model: the ones locate
// found, else as historyAndModel finds them.
func (p *parser) history(root, key string) (hist, model string) {
	if p.sess != nil && p.sess.prev != nil {
		return p.sess.hist, p.sess.model
	}
	return historyAndModel(root, key)
}

// resume returns where the walk of the history array arr begins and the
// index of the message there: past the cached messages, with the parser's
// state restored, when the request extends its session's last one (last
// is where the last of them starts and ends in arr); else the first
// message. It also sizes the arena for what is left to read. Adapters call
// it before anything is written to the arena or the steps.
func (p *parser) resume(arr string) (at, idx int, last [2]int) {
	sp := p.sess
	if sp == nil {
		return rawjson.SkipSpace(arr, 1), 0, last
	}
	sp.arr = p.offset(arr)
	if sp.prev != nil && !p.restore(sp.prev) {
		sp.prev = nil // another request of the session is extending it
	}
	if sp.prev == nil {
		// The cache keeps the arena as long as the session: it grows in
		// chunks, not sized for the body, most of which (a system prompt,
		// JSON syntax) it may never hold.
		p.ar = newArena(min(len(p.src)+1024, arenaChunk))
		return rawjson.SkipSpace(arr, 1), 0, last
	}
	// The new messages' strings fit in their own bytes, and the cache
	// keeps this arena for the session: no 4 KiB minimum per turn, and
	// small chunks should a turn need more (primary arguments are copies).
	n := len(arr) - sp.region + len(sp.model) + 64
	p.ar = arena{buf: make([]byte, 0, n), held: n, chunk: 1024}
	return rawjson.SkipSpace(arr, sp.region), sp.n, sp.last
}

// restore takes over prev's steps and state; false when another parse
// leased prev (see SessionCache.lease). Leased, prev's steps are extended
// in place; else they are copied into memory of this parse's own, as
// others read them. Either way the calls of the steps this parse may
// write are copied: pairing a result (findCall: a call of the last
// lookBack steps with none yet) or adding to the last step writes there,
// and calls are shared with the session's earlier trajectories. The calls
// of other steps stay shared, and nothing writes them (compact, forget).
func (p *parser) restore(prev *cacheEntry) bool {
	own, ok := prev.cache.lease(prev)
	if !ok {
		return false
	}
	sp := p.sess
	sp.base, sp.held, sp.calls = len(prev.steps), prev.held, prev.calls
	sp.region, sp.n, sp.last = prev.prefix, prev.n, prev.last
	n := len(prev.steps)
	from := max(0, n-lookBack)
	steps := prev.steps
	sp.prior = priorSteps{n: n}
	switch {
	case !own:
		steps = make([]Step, n, n+stepsRoom)
		copy(steps, prev.steps)
		sp.reading = prev // unleased when the parse ends (ParseSession)
		sp.prior.copied = prev.steps
	case cap(steps) == n:
		steps = make([]Step, n, n+roomFor(n))
		copy(steps, prev.steps)
	}
	sp.prior.saved = sp.saved[:0]
	// The steps it may write: those of the last lookBack with a call not
	// answered yet, which the entry lists (reading every call of them
	// would bring a long history's calls back into the CPU's caches), and
	// the last.
	writable := func(s int) bool {
		if u := prev.unanswered; u.n >= 0 {
			return s == len(steps)-1 || u.has(s)
		}
		return s == len(steps)-1 || unanswered(&steps[s])
	}
	lo := from
	if u := prev.unanswered; u.n >= 0 {
		lo = max(from, len(steps)-1)
		if u.n > 0 {
			lo = min(lo, int(u.at[0]))
		}
	}
	k := 0
	for s := lo; s < len(steps); s++ {
		if writable(s) {
			k += len(steps[s].Calls)
		}
	}
	if k > 0 {
		calls := make([]Call, k)
		k = 0
		for s := lo; s < len(steps); s++ {
			src := steps[s].Calls
			if len(src) == 0 || !writable(s) {
				continue // nil stays nil
			}
			sp.prior.save(s, steps[s])
			for i := range src {
				src[i].copyTo(&calls[k+i])
			}
			steps[s].Calls = calls[k : k+len(src) : k+len(src)]
			k += len(src)
		}
	}
	if last := len(steps) - 1; last >= 0 && len(steps[last].Calls) == 0 {
		sp.prior.save(last, steps[last]) // its text may be added to
	}
	p.t.Steps = steps
	p.t.Start, p.t.churn = prev.start, prev.churn
	p.lastAssistant, p.open = prev.lastAssistant, prev.open
	return true
}

// unansweredSteps lists, in order, the steps of an entry's last lookBack
// with a call no result was paired with yet: the ones a parse resuming
// from it may write besides the last (see restore). Agents answer every
// call in the next request, so the list is most often empty; n < 0 when
// it did not fit.
type unansweredSteps struct {
	at [3]int32
	n  int8
}

func (u *unansweredSteps) has(s int) bool {
	return slices.Contains(u.at[:max(0, u.n)], int32(s))
}

func (u *unansweredSteps) add(s int) {
	switch {
	case u.n < 0 || u.has(s):
	case int(u.n) == len(u.at):
		u.n = -1
	default:
		u.at[u.n] = int32(s)
		u.n++
		slices.Sort(u.at[:u.n])
	}
}

// unanswered reports whether a call of st has no result yet.
func unanswered(st *Step) bool {
	for i := range st.Calls {
		if !st.Calls[i].HasResult {
			return true
		}
	}
	return false
}

// unanswered lists the steps of t's last lookBack with a call not
// answered yet, for the entry this parse leaves. Resuming, only the steps
// it wrote can be: restore saved each step the entry listed, and the
// parse added the others.
func (sp *sessionParse) unanswered(t *Trajectory) (u unansweredSteps) {
	lo := max(0, len(t.Steps)-lookBack)
	check := func(s int) {
		if s >= lo && unanswered(&t.Steps[s]) {
			u.add(s)
		}
	}
	from := lo
	if sp.prev != nil {
		for _, sv := range sp.prior.saved {
			check(sv.at)
		}
		from = max(lo, sp.base)
	}
	for s := from; s < len(t.Steps); s++ {
		check(s)
	}
	return u
}

// priorSteps tells what the steps a parse took over were before it wrote
// any (see compact): the entry's when it copied them; when it extends
// them in place, the ones restore let it write (copying their calls),
// saved (in both cases), the others being as they were.
type priorSteps struct {
	n      int    // steps taken over
	copied []Step // the entry's steps, when copied
	saved  []savedStep
}

type savedStep struct {
	at int
	st Step
}

func (ps *priorSteps) save(at int, st Step) {
	ps.saved = append(ps.saved, savedStep{at, st})
}

// at returns what step i of steps was, nil for one this parse added.
func (ps *priorSteps) at(steps []Step, i int) *Step {
	switch {
	case i >= ps.n:
		return nil
	case ps.copied != nil:
		return &ps.copied[i]
	}
	for k := range ps.saved {
		if ps.saved[k].at == i {
			return &ps.saved[k].st
		}
	}
	return &steps[i]
}

// walkHistory walks the history array arr from arr[at], where resume
// starts it, calling fn with each element and its index (idx for the first)
// and noting each one fn accepts as the last read; an error from fn ends the
// walk and is returned. After a whole walk the trajectory counts the
// history's messages, those resumed from the cache included.
func (p *parser) walkHistory(arr string, at, idx int, fn func(i int, el string) error) error {
	var err error
	elementsFrom(arr, at, func(el string) bool {
		if err = fn(idx, el); err != nil {
			return false
		}
		p.note(el)
		idx++
		return true
	})
	if err != nil {
		return err
	}
	p.t.Messages = idx
	return nil
}

// note records message raw, a view of the history array, as the last one
// read: the next request's prefix check covers the array up to its end.
func (p *parser) note(raw string) {
	sp := p.sess
	if sp == nil {
		return
	}
	start := p.offset(raw) - sp.arr
	end := start + len(raw)
	sp.region, sp.last = end, [2]int{start, end}
	sp.n++
}

// finish builds the entry a successful walk leaves in the cache; none for
// a history with no message.
func (sp *sessionParse) finish(p *parser) {
	if sp.n == 0 {
		return
	}
	t := p.t
	_, sum := sp.hash.extend(p.src[sp.arr : sp.arr+sp.region])
	rehome(t.Steps[sp.base:])
	held, from, counted := sp.held+p.ar.held, 0, 0
	if sp.digest {
		// The cache's steps whose results left the reach; then the steps
		// this parse wrote: the new ones and the restored ones it may
		// have changed.
		lo, prevFrom := 0, 0
		if sp.prev != nil {
			lo, prevFrom = max(0, sp.base-lookBack), sp.prev.from
		}
		var skip int
		from, skip, counted = sp.reach(t)
		t.reach = reachMemo{e: sp.engine, steps: len(t.Steps), start: t.Start, from: from, skip: skip}
		held = sp.held
		if end := min(from, sp.base); prevFrom < end {
			held -= forget(t.Steps[prevFrom:end])
		}
		held += compact(t.Steps, lo, &sp.prior, from)
		held -= sp.engine.unreport(t, lo, sp.base)
	}
	steps := t.Steps
	if cap(steps)-len(steps) > roomFor(len(steps)) {
		// Grown by appends (a full parse, or a turn of many steps): the
		// cache would keep up to as many empty steps as full ones.
		steps = slices.Clone(steps)
	}
	t.Steps = slices.Clip(t.Steps) // the room is the entry's
	calls := sp.calls
	for s := sp.base; s < len(t.Steps); s++ {
		calls += len(t.Steps[s].Calls)
	}
	for _, sv := range sp.prior.saved {
		// Calls joined a step of the cache's (Responses).
		calls += len(t.Steps[sv.at].Calls) - len(sv.st.Calls)
	}
	sp.done = &cacheEntry{
		n:             sp.n,
		prefix:        sp.region,
		sum:           sum,
		last:          sp.last,
		steps:         steps,
		start:         t.Start,
		churn:         t.churn,
		calls:         calls,
		lastAssistant: p.lastAssistant,
		open:          p.open,
		unanswered:    sp.unanswered(t),
		engine:        sp.engine,
		from:          from,
		counted:       counted,
		held:          held,
	}
}

// reach is the engine's reach over t's steps (Engine.reach). Resuming a
// session, it moves the previous turn's on, reading only the steps this
// parse wrote and those the reach passes: not the whole history, most of
// which has left the CPU's caches since the previous turn. The steps
// this parse took over are as they were but for those it saved (see
// restore), whose calls it may have added to.
func (sp *sessionParse) reach(t *Trajectory) (from, skip, counted int) {
	e, prev := sp.engine, sp.prev
	if prev == nil || t.Start != prev.start || sp.base != len(prev.steps) {
		return e.walkReach(t)
	}
	n := prev.counted
	for _, sv := range sp.prior.saved {
		if sv.at < prev.from {
			continue
		}
		d := e.counted(&t.Steps[sv.at]) - e.counted(&sv.st)
		if d < 0 {
			return e.walkReach(t) // calls gone: the reach may move back
		}
		n += d
	}
	for s := sp.base; s < len(t.Steps); s++ {
		n += e.counted(&t.Steps[s])
	}
	from = prev.from
	if n < maxEvents {
		if from != max(0, min(t.Start, len(t.Steps))) {
			return e.walkReach(t)
		}
		return from, 0, n
	}
	for from < len(t.Steps)-1 {
		c := e.counted(&t.Steps[from])
		if n-c < maxEvents {
			break
		}
		n -= c
		from++
	}
	return from, n - maxEvents, n
}

// compact digests the results of steps from on (see digestResult) and
// drops those before, which no rule reads (they are out of the reach);
// then it moves the strings the
// steps got from this parse into one allocation of their size, so that
// the cache keeps neither the parse's arena nor the tool output in it.
// It reads the steps from lo on; a string a step had before this parse
// (prior) is already the cache's. It returns the memory the steps' new
// strings, digests, edit facts and errors hold, less that of the digests
// dropped.
func compact(steps []Step, lo int, prior *priorSteps, from int) int {
	digests := 0
	for i := lo; i < len(steps); i++ {
		if ps := prior.at(steps, i); ps != nil && sameCalls(steps[i].Calls, ps.Calls) {
			continue // calls an earlier turn compacted (or forget, out of reach)
		}
		for k := range steps[i].Calls {
			c := &steps[i].Calls[k]
			switch {
			case i < from:
				// Out of reach: forget dropped the results of the calls
				// restored unwritten, which are the cache's.
				if c.digested() || c.Result != "" {
					digests -= c.dropDigest()
					c.Result, c.resultFacts = "", 0
				}
			case c.HasResult && !c.digested():
				digestResult(c)
				digests += c.digest().size()
			}
		}
	}
	parts := callParts(steps, lo, prior)
	n := 0
	eachNewString(steps, lo, prior, func(s *string) { n += len(*s) }, func(*string, string) {})
	buf := make([]byte, 0, n)
	eachNewString(steps, lo, prior, func(s *string) {
		if *s == "" {
			return
		}
		m := len(buf)
		buf = append(buf, *s...)
		*s = unsafe.String(&buf[m], len(*s))
	}, func(s *string, to string) { *s = to })
	return n + digests + parts
}

// eachNewString calls own with each string of the steps from lo on that
// they did not have before (see compact), in order, or share with it and
// an equal string it may
// take instead: one the steps hold already (the previous step's text or
// tool name, or the primary argument in the call's canonical arguments,
// which often quote it). Agents repeat their narration and their tools,
// and a call's strings are most of what a cached step holds. The choice
// depends on the strings' values only, so that two walks, one before own
// moves them and one while it does, choose alike.
func eachNewString(steps []Step, lo int, prior *priorSteps, own func(*string), share func(*string, string)) {
	for i := lo; i < len(steps); i++ {
		st := &steps[i]
		var before *Step
		ps := prior.at(steps, i)
		if i > 0 {
			before = &steps[i-1]
		}
		if ps != nil && sameString(st.Text, ps.Text) && sameCalls(st.Calls, ps.Calls) {
			continue // a restored step this parse did not write
		}
		switch {
		case ps != nil && sameString(st.Text, ps.Text):
		case before != nil && st.Text != "" && st.Text == before.Text:
			share(&st.Text, before.Text)
		default:
			own(&st.Text)
		}
		for k := range st.Calls {
			c := &st.Calls[k]
			var was *[7]*string
			if ps != nil && k < len(ps.Calls) {
				w := ps.Calls[k].strings()
				was = &w
			}
			for j, f := range c.strings() {
				if was != nil && sameString(*f, *was[j]) {
					continue
				}
				if to := repeated(f, c, before); to != "" {
					share(f, to)
				} else {
					own(f)
				}
			}
		}
	}
}

// callParts returns the memory of the edit facts and errors of the calls
// of the steps from lo on that they did not have before (see compact):
// the memory of the cache's calls counts their strings and the calls, not
// these.
func callParts(steps []Step, lo int, prior *priorSteps) int {
	n := 0
	for i := lo; i < len(steps); i++ {
		ps := prior.at(steps, i)
		if ps != nil && sameCalls(steps[i].Calls, ps.Calls) {
			continue // the calls it had
		}
		for k := range steps[i].Calls {
			c := &steps[i].Calls[k]
			var was *Call
			if ps != nil && k < len(ps.Calls) {
				was = &ps.Calls[k]
			}
			if c.extra == nil || was != nil && was.extra == c.extra {
				continue
			}
			n += extraSize
			if e := c.argEdit(); e != nil && (was == nil || was.argEdit() != e) {
				n += int(unsafe.Sizeof(editFacts{}))
			}
			if f := c.fail(); f != nil && (was == nil || was.fail() != f) {
				n += int(unsafe.Sizeof(callError{}))
			}
		}
	}
	return n
}

// sameCalls reports whether a and b are the same calls in memory.
func sameCalls(a, b []Call) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// repeated returns a string equal to *f, a string of call c of the step
// after before, that the cache holds already, or is moving in the same
// walk before *f: a tool name of before's calls, or the primary argument
// or edited path where the canonical arguments quote it. "" if none.
func repeated(f *string, c *Call, before *Step) string {
	switch {
	case f == &c.Name && before != nil:
		for k := range before.Calls {
			if before.Calls[k].Name == c.Name {
				return before.Calls[k].Name
			}
		}
	case f == &c.Primary || c.argEdit() != nil && f == &c.argEdit().path:
		if at := strings.Index(c.Args, *f); *f != "" && at >= 0 {
			return c.Args[at : at+len(*f)]
		}
	}
	return ""
}

// unreport drops the evidence text of the digests in t's steps from lo
// on that no rule can report any more (see evidenceZone); those of steps
// before lo had theirs dropped by an earlier turn, or keep the text of a
// few calls. The calls of the steps before base may be the cache's: they
// are replaced, not written. It returns the memory freed.
func (e *Engine) unreport(t *Trajectory, lo, base int) int {
	z := e.evidenceZone(t)
	freed := 0
	for s := lo; s < len(t.Steps); s++ {
		st := &t.Steps[s]
		copied := s >= base
		for k := range st.Calls {
			if st.Calls[k].digest() == nil || z.reports(s, k, &st.Calls[k]) {
				continue
			}
			if !copied {
				calls := make([]Call, len(st.Calls))
				for j := range st.Calls {
					st.Calls[j].copyTo(&calls[j])
				}
				st.Calls, copied = calls, true
			}
			freed += st.Calls[k].dropDigest()
		}
	}
	return freed
}

// rehome moves the calls of steps into one array of their number: the
// parser carves calls from chunks of 64, and a turn's one call would keep
// its chunk alive in the cache.
func rehome(steps []Step) {
	n := 0
	for i := range steps {
		n += len(steps[i].Calls)
	}
	if n == 0 {
		return
	}
	calls := make([]Call, n)
	k := 0
	for i := range steps {
		src := steps[i].Calls
		if len(src) == 0 {
			continue // nil stays nil
		}
		for j := range src {
			src[j].copyTo(&calls[k+j])
		}
		steps[i].Calls = calls[k : k+len(src) : k+len(src)]
		k += len(src)
	}
}

// forget drops the results of steps that left the reach: their calls are
// replaced, not written, as they may be the cache's, shared with other
// requests. It returns the memory of the digests dropped.
func forget(steps []Step) int {
	freed := 0
	for i := range steps {
		st := &steps[i]
		kept := false
		for k := range st.Calls {
			kept = kept || st.Calls[k].digested() || st.Calls[k].Result != ""
		}
		if !kept {
			continue
		}
		calls := make([]Call, len(st.Calls))
		for k := range st.Calls {
			st.Calls[k].copyTo(&calls[k])
			freed += calls[k].dropDigest()
			calls[k].Result, calls[k].resultFacts = "", 0
		}
		st.Calls = calls
	}
	return freed
}

// strings are the call's string fields, its error's text and the path
// its edit facts name (a view of Args, see editFactsOf); noString for
// those it has not.
func (c *Call) strings() [7]*string {
	errText, path := &noString, &noString
	if f := c.fail(); f != nil {
		errText = &f.text
	}
	if e := c.argEdit(); e != nil {
		path = &e.path
	}
	return [...]*string{&c.ID, &c.Name, &c.Args, &c.Primary, &c.Result, errText, path}
}

// noString stands for a string a call does not have; nothing writes it
// (compact moves no empty string).
var noString string

// sameString reports whether a and b are the same bytes in memory.
func sameString(a, b string) bool {
	return len(a) == len(b) && (a == "" || unsafe.StringData(a) == unsafe.StringData(b))
}

// hashBlock is the size of the blocks prefixHash hashes one at a time: at
// memory speed (xxh3 one-shot), and small enough that re-reading the
// partial last block of a prefix costs next to nothing.
const hashBlock = 64 << 10

// prefixHash hashes a history array's first bytes as a chain of xxh3
// hashes of its full hashBlock-byte blocks, each seeded with the hash
// before it (the first with the cache's seed), and of the partial block
// left. The chain after the full blocks is kept, so a longer prefix of
// the same array is hashed from there: one pass over the array per
// request, whatever its length.
type prefixHash struct {
	blocks int    // full blocks hashed
	chain  uint64 // the hash after them
}

// extend returns the state after the full blocks of prefix, which begins
// with the h.blocks blocks h has hashed, and the hash of the whole prefix.
func (h prefixHash) extend(prefix string) (prefixHash, uint64) {
	for end := (h.blocks + 1) * hashBlock; end <= len(prefix); end += hashBlock {
		h.chain = xxh3.HashStringSeed(prefix[end-hashBlock:end], h.chain)
		h.blocks++
	}
	return h, xxh3.HashStringSeed(prefix[h.blocks*hashBlock:], h.chain)
}

// copyTo copies c to dst field by field: c may be in a Trajectory being
// inspected, whose result fingerprint is written atomically meanwhile.
func (c *Call) copyTo(dst *Call) {
	*dst = Call{
		ID: c.ID, Name: c.Name, Args: c.Args, Primary: c.Primary,
		Fingerprint: c.Fingerprint, PrimaryFingerprint: c.PrimaryFingerprint,
		argTarget: c.argTarget, argBits: c.argBits,
		HasResult: c.HasResult, Result: c.Result, ResultMessage: c.ResultMessage,
		resultFP: atomic.LoadUint64(&c.resultFP), resultFacts: c.resultFacts,
		IsError: c.IsError, extra: c.extra,
	}
}
