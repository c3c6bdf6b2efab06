package observe

import (
	"github.com/loopguard/loopguard/inspect"
)

// The admin API's reads of the record: session lists, one session's timeline, the live feed.

// Filter selects sessions. Zero fields select everything.
type Filter struct {
	Category inspect.Category
	Model    string
	State    string
	// Limit caps the sessions returned; 0 means 100.
	Limit int
}

func (f *Filter) match(s *session) bool {
	if f.Category != "" && s.cats&(1<<categoryIndex(f.Category)) == 0 {
		return false
	}
	if f.Model != "" && s.Model != f.Model {
		return false
	}
	return f.State == "" || s.State == f.State
}

// SessionList is the answer of Sessions.
type SessionList struct {
	// Total is the number of sessions held, Matched those the filter selects.
	Total    int              `json:"total"`
	Matched  int              `json:"matched"`
	Sessions []SessionSummary `json:"sessions"`
	// States counts the matched sessions by state.
	States map[string]int `json:"states"`
}

// Sessions returns the sessions f selects, most recently seen first.
func (r *Recorder) Sessions(f Filter) SessionList {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	out := SessionList{Sessions: make([]SessionSummary, 0, min(f.Limit, 128)), States: map[string]int{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	out.Total = len(r.sessions)
	for s := r.newest; s != nil; s = s.prev {
		if !f.match(s) {
			continue
		}
		out.Matched++
		out.States[s.State]++
		if len(out.Sessions) < f.Limit {
			out.Sessions = append(out.Sessions, s.summary())
		}
	}
	return out
}

// summary copies s's summary with its categories listed. r.mu is held.
func (s *session) summary() SessionSummary {
	sum := s.SessionSummary
	sum.Categories = nil
	for i := 0; i < nCat; i++ {
		if s.cats&(1<<i) != 0 {
			sum.Categories = append(sum.Categories, categories[i])
		}
	}
	return sum
}

// Session returns key's summary and timeline, oldest entry first; ok is
// false when the recorder holds no such session.
func (r *Recorder) Session(key string) (sum SessionSummary, timeline []Entry, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[key]
	if s == nil {
		return sum, nil, false
	}
	timeline = make([]Entry, 0, len(s.ring))
	timeline = append(timeline, s.ring[s.next:]...)
	timeline = append(timeline, s.ring[:s.next]...)
	return s.summary(), timeline, true
}

// Since returns up to limit feed entries newer than seq, oldest first, and
// the sequence number to resume after. Entries that scrolled out of the
// feed are skipped.
func (r *Recorder) Since(seq uint64, limit int) ([]Entry, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(len(r.feed))
	if r.seq > n && seq < r.seq-n {
		seq = r.seq - n
	}
	if seq > r.seq {
		seq = r.seq // the recorder was replaced, or seq is bogus
	}
	var out []Entry
	for i := seq + 1; i <= r.seq && len(out) < limit; i++ {
		out = append(out, r.feed[i%n])
		seq = i
	}
	return out, seq
}

// Seq returns the sequence number of the newest entry.
func (r *Recorder) Seq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}
