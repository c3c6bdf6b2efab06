package observe

import (
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
)

// Defaults of Options.
const (
	DefaultMaxSessions = 10000
	DefaultTimeline    = 32
	DefaultFeed        = 1024
	DefaultBuckets     = 60 // one hour of one-minute buckets
)

// maxModelLen bounds a model name kept in memory.
const maxModelLen = 64

// Kind says what a timeline entry records.
type Kind string

// Timeline entry kinds.
const (
	// KindRequest is a chat request with the decision made on it: the
	// detection (Category, Confidence, Brief, Pattern) when the history
	// showed a loop, the intervention (Action, Level) when one was made.
	KindRequest Kind = "request"
	// KindCut is an answer cut short because it degenerated.
	KindCut Kind = "cut"
	// KindRecovery is the outcome of an earlier intervention on Pattern:
	// Outcome says whether the loop stopped or came back.
	KindRecovery Kind = "recovery"
	// KindAdmin is an operator's action: a reset or a mode override.
	KindAdmin Kind = "admin"
	// KindJudge is a check of the optional judge: Outcome says how it
	// ended; a stuck verdict has Category semantic_loop, the judge's
	// Confidence and, in Brief, what it saw repeating.
	KindJudge Kind = "judge"
)

// Fingerprint is a tool call's fingerprint (inspect.Call.Fingerprint); it
// is written as 16 hex digits.
type Fingerprint uint64

// MarshalText implements encoding.TextMarshaler.
func (f Fingerprint) MarshalText() ([]byte, error) {
	if f == 0 {
		return []byte{}, nil
	}
	var b [8]byte
	for i := range b {
		b[i] = byte(f >> (56 - 8*i))
	}
	return hex.AppendEncode(make([]byte, 0, 16), b[:]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, so that clients of the
// admin API (`loopguard run -proxy`) read timelines back.
func (f *Fingerprint) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*f = 0
		return nil
	}
	v, err := strconv.ParseUint(string(text), 16, 64)
	if err != nil {
		return fmt.Errorf("observe: fingerprint %q: %w", text, err)
	}
	*f = Fingerprint(v)
	return nil
}

// Entry is one line of a session's timeline. It holds names, counts and
// fingerprints, never tool arguments or message content; Brief is the
// pattern as policy names it for people (at most about 80 bytes).
type Entry struct {
	// Seq orders all entries of the recorder; the live feed resumes after it.
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Session string    `json:"session"`
	Kind    Kind      `json:"kind"`
	Model   string    `json:"model,omitempty"`
	// API is the wire API of the request (inspect.API: chat, responses,
	// anthropic, ollama), "" where it is not known.
	API inspect.API `json:"api,omitempty"`
	// Steps is the number of assistant turns in the request's history.
	Steps int `json:"steps,omitempty"`
	// Transport is how the turn came (request and cut entries): "http" or
	// "websocket" (a message on a Responses WebSocket).
	Transport string `json:"transport,omitempty"`
	// Tool and Fingerprint name the history's last tool call.
	Tool        string      `json:"tool,omitempty"`
	Fingerprint Fingerprint `json:"fingerprint,omitempty"`

	Category   inspect.Category `json:"category,omitempty"`
	Confidence float64          `json:"confidence,omitempty"`
	Brief      string           `json:"brief,omitempty"`
	Pattern    string           `json:"pattern,omitempty"`
	// Action is what was done; Would what enforce mode does (shadow mode).
	Action    policy.Action `json:"action,omitempty"`
	Would     policy.Action `json:"would,omitempty"`
	Level     int           `json:"level"`
	Reapplied bool          `json:"reapplied,omitempty"`

	// Offset and TokensSaved describe a cut.
	Offset      int64 `json:"offset,omitempty"`
	TokensSaved int   `json:"tokens_saved,omitempty"`
	// Outcome is recovered or looped_again (KindRecovery).
	Outcome string `json:"outcome,omitempty"`
	// Note says what an operator did (KindAdmin): noteReset, or a mode
	// override set (Mode) or cleared.
	Note string      `json:"note,omitempty"`
	Mode policy.Mode `json:"mode,omitempty"`
	// Budget is the session budget's decision on the request: the warning
	// share reached, or the budget spent (Action terminate).
	Budget *policy.BudgetUse `json:"budget,omitempty"`
	// Replica names the loopguard replica that saw the entry (Options.Replica;
	// empty for a replica that shares nothing).
	Replica string `json:"replica,omitempty"`

	// remote marks an entry another replica recorded (Cluster), which this
	// one must not publish again.
	remote bool
}

// noteReset is the Note of an operator's session reset.
const noteReset = "reset"

// Session states shown by the admin API and the dashboard.
const (
	StateActive      = "active"      // requests seen, no loop now
	StateLooping     = "looping"     // a loop was detected, nothing was done (shadow mode or below the ladder)
	StateWarned      = "warned"      // the last intervention was a warning
	StateConstrained = "constrained" // the last intervention was constrain or reset
	StateTerminated  = "terminated"  // the last intervention ended the loop
	StateRecovered   = "recovered"   // an intervention's pattern stopped
	StateCut         = "cut"         // the last answer was cut short
)

// SessionSummary is one session as the admin API lists it.
type SessionSummary struct {
	Key       string    `json:"key"`
	Model     string    `json:"model,omitempty"`
	State     string    `json:"state"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	Requests  int       `json:"requests"`
	// Detections counts requests whose history showed a loop.
	Detections    int `json:"detections"`
	Interventions int `json:"interventions"`
	Cuts          int `json:"cuts"`
	TokensSaved   int `json:"tokens_saved,omitempty"`
	// Tokens sums the usage the upstream reported for the session's
	// answers; LoopTokens that of the answers to requests whose history
	// showed a loop: the turns the loop cost.
	Tokens     Usage `json:"tokens"`
	LoopTokens Usage `json:"loop_tokens"`
	// Answered, Refused and Failed count the session's model calls by how
	// they ended: a 2xx or 3xx answer (loopguard's own included), a 4xx,
	// and a 5xx or no answer from the upstream (502, 504).
	Answered    int `json:"answered"`
	Refused     int `json:"refused"`
	Failed      int `json:"failed_upstream"`
	Recovered   int `json:"recovered"`
	LoopedAgain int `json:"looped_again"`
	// Category, Brief, Action and Level describe the last detection.
	Category inspect.Category `json:"category,omitempty"`
	Brief    string           `json:"brief,omitempty"`
	Action   policy.Action    `json:"action,omitempty"`
	Level    int              `json:"level"`
	// Mode is the admin override set through this recorder's admin API.
	Mode       policy.Mode        `json:"mode,omitempty"`
	Categories []inspect.Category `json:"categories,omitempty"`
}

// pending is an intervention whose outcome is not known yet.
type pending struct {
	category int
	level    int
	brief    string
}

type session struct {
	SessionSummary
	cats    uint32 // bit i: categories[i] seen
	looping bool   // the last request's history showed a loop
	pending map[string]pending
	ring    []Entry
	next    int // ring slot of the next entry once the ring is full
	// newest is the time of the newest entry; another replica's entries
	// may arrive after newer ones of this replica (Cluster).
	newest     time.Time
	prev, newr *session
}

// Recorder keeps a bounded record of recent sessions: the most recently
// seen MaxSessions sessions, each with a ring of its last Timeline entries,
// one-minute stats buckets for charts, recovery counts, and a feed of the
// last Feed entries for live updates. It is safe for concurrent use; one
// mutex guards it, held for a few hundred nanoseconds per request.
type Recorder struct {
	mu       sync.Mutex
	sessions map[string]*session
	// newest and oldest end the LRU list; session.newr points towards newest.
	newest, oldest *session
	max, timeline  int
	seq            uint64
	feed           []Entry
	buckets        []bucket
	recovery       map[recKey]*[2]int // [recovered, looped_again]
	metrics        *Metrics
	now            func() time.Time
	replica        string // tags this recorder's own entries
	// names holds copies of the tool and model names entries keep: they
	// arrive as substrings of a request, which an entry must not keep
	// alive, and copying each anew would cost an allocation per request.
	names map[string]string
}

// maxNames bounds Recorder.names; a full table starts over (the copies
// entries hold stay valid).
const maxNames = 4096

// name returns the recorder's copy of s. r.mu is held.
func (r *Recorder) name(s string) string {
	if s == "" {
		return ""
	}
	if c, ok := r.names[s]; ok {
		return c
	}
	if len(r.names) >= maxNames {
		clear(r.names)
	}
	c := strings.Clone(s)
	r.names[c] = c
	return c
}

// NewRecorder returns an empty recorder sized by opts; metrics, when not
// nil, counts recoveries.
func NewRecorder(opts Options, metrics *Metrics) *Recorder {
	opts.defaults()
	r := &Recorder{
		sessions: make(map[string]*session, min(opts.MaxSessions, 1024)),
		max:      opts.MaxSessions,
		timeline: opts.Timeline,
		feed:     make([]Entry, opts.Feed),
		buckets:  make([]bucket, opts.Buckets),
		recovery: make(map[recKey]*[2]int),
		names:    make(map[string]string),
		metrics:  metrics,
		now:      opts.Now,
		replica:  opts.Replica,
	}
	return r
}

// touch returns key's session, created when new, moved to the newest end.
// r.mu is held.
func (r *Recorder) touch(key string, now time.Time) *session {
	s := r.sessions[key]
	if s == nil {
		if len(r.sessions) >= r.max {
			r.evict()
		}
		// The key outlives the request it may be a substring of.
		key = strings.Clone(key)
		s = &session{SessionSummary: SessionSummary{Key: key, FirstSeen: now, State: StateActive, Level: -1}}
		r.sessions[key] = s
	} else {
		r.unlink(s)
	}
	// Another replica's entries can be older than those seen here.
	if now.Before(s.FirstSeen) {
		s.FirstSeen = now
	}
	if now.After(s.LastSeen) {
		s.LastSeen = now
	}
	s.prev, s.newr = r.newest, nil
	if r.newest != nil {
		r.newest.newr = s
	}
	r.newest = s
	if r.oldest == nil {
		r.oldest = s
	}
	return s
}

func (r *Recorder) unlink(s *session) {
	if s.prev != nil {
		s.prev.newr = s.newr
	} else {
		r.oldest = s.newr
	}
	if s.newr != nil {
		s.newr.prev = s.prev
	} else {
		r.newest = s.prev
	}
	s.prev, s.newr = nil, nil
}

func (r *Recorder) evict() {
	if s := r.oldest; s != nil {
		r.unlink(s)
		delete(r.sessions, s.Key)
	}
}

// add appends e to s's timeline and to the feed. r.mu is held.
func (r *Recorder) add(s *session, e *Entry) {
	if !e.remote {
		e.Replica = r.replica
	}
	r.seq++
	e.Seq = r.seq
	r.feed[e.Seq%uint64(len(r.feed))] = *e
	if e.remote && len(s.ring) > 0 && e.At.Before(s.newest) {
		r.insertLate(s, e)
		return
	}
	s.newest = e.At
	if len(s.ring) < r.timeline {
		s.ring = append(s.ring, *e)
	} else {
		s.ring[s.next] = *e
		s.next = (s.next + 1) % r.timeline
	}
}

// insertLate puts e, older than s's newest entry, in its place in s's
// timeline, dropping the oldest entry when the ring is full. r.mu is held.
func (r *Recorder) insertLate(s *session, e *Entry) {
	tl := make([]Entry, 0, len(s.ring)+1)
	tl = append(append(tl, s.ring[s.next:]...), s.ring[:s.next]...)
	i := sort.Search(len(tl), func(i int) bool { return tl[i].At.After(e.At) })
	tl = slices.Insert(tl, i, *e)
	if len(tl) > r.timeline {
		tl = tl[1:]
	}
	s.ring, s.next = tl, 0
}

// latest reports whether e, about to be added to s, is its newest entry,
// whose state the session shows. This replica's own entries always are.
func latest(s *session, e *Entry) bool {
	return !e.remote || !e.At.Before(s.newest)
}

// request records one chat request and its decision (nil: none was made).
func (r *Recorder) request(info *RequestInfo, now time.Time) {
	model := info.Model
	if len(model) > maxModelLen {
		model = model[:maxModelLen]
	}
	d := info.Decision

	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.touch(info.Session, now)
	e := Entry{At: now, Session: s.Key, Kind: KindRequest, Model: r.name(model), API: info.API, Steps: info.Steps,
		Transport: transportLabels[transportIndex(info.Transport)], Tool: r.name(info.Tool), Fingerprint: Fingerprint(info.Fingerprint), Level: -1}
	s.looping = d != nil && d.Verdict.Loop
	if d != nil {
		r.recoveries(s, d, now)
		if d.Verdict.Loop {
			e.Category, e.Confidence, e.Brief, e.Pattern = d.Verdict.Category, d.Verdict.Confidence, d.Brief, d.Pattern
			e.Action, e.Would, e.Level, e.Reapplied = d.Action, d.Would, d.Level, d.Reapplied
		} else if d.Action != policy.None && d.Action != "" {
			// A warning about an earlier cut, or the session's budget: an
			// intervention without a loop in the history.
			e.Action, e.Would, e.Level = d.Action, d.Would, d.Level
		}
		if d.Budget != nil {
			b := *d.Budget
			e.Budget = &b
		}
	}
	r.tally(s, &e, d != nil, d != nil && len(d.Recovered) > 0)
	r.add(s, &e)
}

// tally counts request entry e in s's summary and in the stats. decided
// says a decision was made on the request, recovered that it showed an
// earlier pattern stopped. r.mu is held.
func (r *Recorder) tally(s *session, e *Entry, decided, recovered bool) {
	c := Counts{Requests: 1}
	cat := catNone
	s.Requests++
	if e.Model != "" {
		s.Model = e.Model
	}
	loop := e.Category != ""
	last := latest(s, e)
	if loop {
		cat = categoryIndex(e.Category)
		s.Detections++
		s.cats |= 1 << cat
		if last {
			s.Category, s.Brief, s.Action, s.Level = e.Category, e.Brief, e.Would, e.Level
		}
		c.Detections = 1
	}
	if isIntervention(e.Action) {
		s.Interventions++
		c.Interventions = 1
		if e.Action == policy.Terminate {
			c.Terminations = 1
		}
	}
	if decided && last {
		s.State = stateAfter(s.State, e.Action, loop, recovered)
	}
	r.count(e.At, e.Model, cat, c)
}

// response records the end of a response: a cut, when there was one.
func (r *Recorder) response(info *ResponseInfo, now time.Time) {
	if info.Session == "" || info.Cut.Category == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.touch(info.Session, now)
	e := Entry{At: now, Session: s.Key, Kind: KindCut, Model: s.Model, Category: info.Cut.Category,
		Offset: info.Cut.Offset, TokensSaved: info.Cut.TokensSaved, Level: -1,
		Transport: transportLabels[transportIndex(info.Transport)]}
	r.tallyCut(s, &e)
	r.add(s, &e)
}

// tallyCut counts cut entry e in s's summary and in the stats. r.mu is held.
func (r *Recorder) tallyCut(s *session, e *Entry) {
	cat := categoryIndex(e.Category)
	s.Cuts++
	s.TokensSaved += e.TokensSaved
	s.cats |= 1 << cat
	if latest(s, e) {
		s.State = StateCut
	}
	r.count(e.At, e.Model, cat, Counts{Cuts: 1, TokensSaved: e.TokensSaved})
}

// statusClientClosed is nginx's status for a request whose client left
// before the answer, as the proxy logs it.
const statusClientClosed = 499

// answer counts how a model call of its session ended, and adds the tokens
// its answer reported; they count as loop tokens when the request it
// answered showed a loop.
func (r *Recorder) answer(info *ResponseInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[info.Session]
	if s == nil {
		return // evicted since its request
	}
	switch {
	case info.Status == statusClientClosed:
		// The agent left before the answer: it ended neither way.
	case info.Status >= 500:
		s.Failed++
	case info.Status >= 400:
		s.Refused++
	default:
		s.Answered++
	}
	if info.Usage == (Usage{}) {
		return
	}
	s.Tokens.Input += info.Usage.Input
	s.Tokens.Output += info.Usage.Output
	if s.looping {
		s.LoopTokens.Input += info.Usage.Input
		s.LoopTokens.Output += info.Usage.Output
	}
}

// admin records an operator's action on session key: a reset (note is
// noteReset) or the mode override mode (note says which).
func (r *Recorder) admin(key, note string, mode policy.Mode, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.touch(key, now)
	e := Entry{At: now, Session: s.Key, Kind: KindAdmin, Note: note, Mode: mode, Level: -1}
	applyAdmin(s, &e)
	r.add(s, &e)
}

// applyAdmin applies admin entry e to s. r.mu is held.
func applyAdmin(s *session, e *Entry) {
	if e.Note != noteReset {
		s.Mode = e.Mode
		return
	}
	// A reset forgets the ladder, so pending outcomes can no longer be told.
	clear(s.pending)
	s.State, s.Level, s.Action = StateActive, -1, ""
}

// judge records a check of the optional judge on a session.
func (r *Recorder) judge(info *JudgeInfo, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.touch(info.Session, now)
	e := Entry{At: now, Session: s.Key, Kind: KindJudge, Model: s.Model, Steps: info.Step + 1,
		Outcome: info.Outcome, Confidence: info.Confidence, Level: -1}
	if info.Stuck {
		e.Category, e.Brief = inspect.SemanticLoop, clipBrief(info.What)
	}
	r.add(s, &e)
}

// clipBrief cuts s to a brief's length on a rune boundary.
func clipBrief(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// ingest records an entry another replica recorded (Cluster) as if this
// one had: the session's summary, its timeline, the stats and the feed.
// Tokens are not shared: they are no entry.
func (r *Recorder) ingest(e Entry) {
	if e.Session == "" || len(e.Session) > 4*policy.MaxKeyLen {
		return
	}
	e.remote = true
	if len(e.Model) > maxModelLen {
		e.Model = e.Model[:maxModelLen]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.touch(e.Session, e.At)
	e.Session, e.Model, e.Tool = s.Key, r.name(e.Model), r.name(e.Tool)
	switch e.Kind {
	case KindRequest:
		r.tally(s, &e, true, false)
		// The agent's next turn may come here: this replica then tells
		// whether the loop stopped.
		if isIntervention(e.Action) && e.Pattern != "" {
			pend(s, e.Pattern, pending{category: categoryIndex(e.Category), level: levelIndex(e.Level), brief: e.Brief})
		}
	case KindCut:
		r.tallyCut(s, &e)
	case KindRecovery:
		delete(s.pending, e.Pattern) // told by the replica that saw it
		r.outcome(s, &e)
		return
	case KindAdmin:
		applyAdmin(s, &e)
	}
	r.add(s, &e)
}
