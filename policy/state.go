package policy

import (
	"sort"
	"strings"
	"time"

	"github.com/loopguard/loopguard/inspect"
)

// Bounds that keep a session's State small whatever the agent does: it is
// serialised on every chat request with the redis store.
const (
	// MaxPatterns is how many loop patterns a session remembers; beyond it
	// the least recently seen inactive one is forgotten first.
	MaxPatterns = 32
	// MaxInterventions is how many interventions a session remembers.
	MaxInterventions = 20
	// MaxCuts is how many pending stream cuts a session keeps.
	MaxCuts = 4
	// maxText bounds each stored text (brief, summary, tool, args).
	maxText = 256
)

// State is what a session's history cannot show: the escalation level per
// loop pattern, the interventions made, the streams cut and the overrides.
// It is JSON-serialisable and bounded in size. Store implementations hand
// out copies; a State never aliases another.
type State struct {
	// Patterns holds the ladder position of each loop pattern seen, keyed by
	// inspect.Verdict.PatternKey.
	Patterns map[string]*Pattern `json:"patterns,omitempty"`
	// Interventions are the last MaxInterventions interventions, oldest
	// first; their briefs are the approaches that already failed.
	Interventions []Intervention `json:"interventions,omitempty"`
	// Cuts are stream cuts recorded by the proxy and not yet reported to the
	// model; the next request consumes them.
	Cuts []Cut `json:"cuts,omitempty"`
	// Mode, when set by an admin, lowers the mode of this session's
	// requests (enforce > shadow > off); it never raises it.
	Mode Mode `json:"mode,omitempty"`
	// Resets counts history collapses, for the reset="N" attribute.
	Resets int `json:"resets,omitempty"`
	// Recoveries counts patterns that stopped after an intervention.
	Recoveries int `json:"recoveries,omitempty"`
	// Items is the record of a Responses API history that lives on the
	// upstream (previous_response_id, conversation): the input and output
	// items loopguard saw go by, raw JSON, oldest first, at most
	// MaxRecordItems. It is stored under a record key (RecordKey), not a
	// session key.
	Items []string `json:"items,omitempty"`
	// Judgement is the optional judge's latest verdict, made after a turn
	// was forwarded and waiting for the session's next request, which
	// consumes it (Policy.RecordJudgement); nil when none waits.
	Judgement *Judgement `json:"judgement,omitempty"`
	// Opening is the Identity.Turn of the run that claimed this derived
	// session key (Policy.Session); "" for keys a client sent.
	Opening string `json:"opening,omitempty"`
	// Tokens and Turns are what the session used of its budget: the
	// tokens the upstream reported and the model calls forwarded; kept
	// only while a budget applies. BudgetWarned: the warning share was
	// reported.
	Tokens       int64 `json:"tokens,omitempty"`
	Turns        int   `json:"turns,omitempty"`
	BudgetWarned bool  `json:"budget_warned,omitempty"`
	// Budget, when set by an admin or `loopguard run`, overrides the
	// configured budget of this session.
	Budget *Budget `json:"budget,omitempty"`
	// Updated is when the state last changed.
	Updated time.Time `json:"updated"`
}

// Pattern is one loop pattern's place on the ladder in one session.
type Pattern struct {
	// Level is the index in Config.Ladder of the last action applied.
	Level    int              `json:"level"`
	Category inspect.Category `json:"category"`
	// Brief is Verdict.Brief(): the pattern as people read it.
	Brief string `json:"brief,omitempty"`
	// Summary is Verdict.Summary(), re-injected while the constraints are active.
	Summary string `json:"summary,omitempty"`
	// Tool and Args name the repeated call, "" for text patterns.
	Tool string `json:"tool,omitempty"`
	Args string `json:"args,omitempty"`
	// Count is the detection's count at the last intervention.
	Count int `json:"count"`
	// Step is Evidence.Last, the step index of the last occurrence, at the
	// last intervention: the loop went on when a later occurrence shows up.
	Step int `json:"step"`
	// Seen is the index of the request's last step at the last intervention,
	// and Messages its message count: a request with more steps, or with a
	// shorter history (the agent compacted it), has new steps.
	Seen     int `json:"seen"`
	Messages int `json:"messages"`
	// Active is true while the pattern's constraints are re-injected.
	Active    bool      `json:"active,omitempty"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
}

// Intervention is one action taken in a session.
type Intervention struct {
	Action   Action           `json:"action"`
	Level    int              `json:"level"`
	Category inspect.Category `json:"category"`
	Pattern  string           `json:"pattern"`
	Brief    string           `json:"brief,omitempty"`
	At       time.Time        `json:"at"`
}

// Judgement is one verdict of the optional judge on a session's
// trajectory.
type Judgement struct {
	Stuck      bool    `json:"stuck"`
	Confidence float64 `json:"confidence"`
	// What names what the judge saw repeating, in its words (shortened).
	What string `json:"what,omitempty"`
	// Step is the index of the last step the judge read: a request whose
	// history ends there is the judged one again (a retry) and leaves the
	// verdict waiting.
	Step int       `json:"step"`
	At   time.Time `json:"at"`
}

// Cut is a degenerate stream the proxy cut short.
type Cut struct {
	Category inspect.Category `json:"category"`
	// Offset is the byte offset in the streamed text where degeneration began.
	Offset int64 `json:"offset"`
	// TokensSaved estimates the completion tokens the cut saved.
	TokensSaved int       `json:"tokens_saved"`
	At          time.Time `json:"at"`
}

// Clone returns a deep copy of s.
func (s *State) Clone() State {
	c := *s
	if s.Patterns != nil {
		c.Patterns = make(map[string]*Pattern, len(s.Patterns))
		for k, p := range s.Patterns {
			cp := *p
			c.Patterns[k] = &cp
		}
	}
	c.Interventions = append([]Intervention(nil), s.Interventions...)
	c.Cuts = append([]Cut(nil), s.Cuts...)
	c.Items = append([]string(nil), s.Items...)
	if s.Judgement != nil {
		j := *s.Judgement
		c.Judgement = &j
	}
	if s.Budget != nil {
		b := *s.Budget
		c.Budget = &b
	}
	return c
}

// addIntervention appends iv, dropping the oldest beyond MaxInterventions.
func (s *State) addIntervention(iv Intervention) {
	s.Interventions = append(s.Interventions, iv)
	if n := len(s.Interventions) - MaxInterventions; n > 0 {
		s.Interventions = append(s.Interventions[:0], s.Interventions[n:]...)
	}
}

// addCut appends c, dropping the oldest beyond MaxCuts.
func (s *State) addCut(c Cut) {
	s.Cuts = append(s.Cuts, c)
	if n := len(s.Cuts) - MaxCuts; n > 0 {
		s.Cuts = append(s.Cuts[:0], s.Cuts[n:]...)
	}
}

// prunePatterns forgets patterns beyond MaxPatterns: inactive ones first,
// then the least recently seen. keep is never forgotten.
func (s *State) prunePatterns(keep string) {
	n := len(s.Patterns) - MaxPatterns
	if n <= 0 {
		return
	}
	keys := make([]string, 0, len(s.Patterns))
	for k := range s.Patterns {
		if k != keep {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := s.Patterns[keys[i]], s.Patterns[keys[j]]
		if a.Active != b.Active {
			return !a.Active
		}
		if !a.LastSeen.Equal(b.LastSeen) {
			return a.LastSeen.Before(b.LastSeen)
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys[:min(n, len(keys))] {
		delete(s.Patterns, k)
	}
}

// clip bounds stored text, cutting on a UTF-8 boundary, and copies it.
func clip(s string) string {
	i := len(s)
	if i > maxText {
		i = maxText
		for i > 0 && s[i]&0xC0 == 0x80 {
			i--
		}
	}
	// A copy: s is often a substring of the request (a tool name, its
	// arguments), and the state outlives the request by the session TTL.
	return strings.Clone(s[:i])
}
