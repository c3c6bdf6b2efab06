package agentrun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
)

// Summary is what a guarded run did, as read from loopguard's record of its
// session. Its JSON form is what `loopguard run -json FILE` writes.
type Summary struct {
	Session string `json:"session"`
	// ExitCode is the command's exit code (128 + signal when a signal ended it).
	ExitCode int `json:"exit_code"`
	// Calls counts the model calls loopguard saw (chat, Responses and
	// Anthropic requests).
	Calls int `json:"model_calls"`
	// Answered, Refused and FailedUpstream count the model calls by how
	// they ended: answered (loopguard's own answers included), refused by
	// the upstream (4xx), failed upstream (5xx, or no answer).
	Answered       int `json:"answered"`
	Refused        int `json:"refused"`
	FailedUpstream int `json:"failed_upstream"`
	// Loops are the loops seen, in order: every request whose history showed
	// a loop, and every answer cut short. The record keeps the session's
	// last observe.DefaultTimeline entries; Detections counts them all.
	Loops         []Loop `json:"loops"`
	Detections    int    `json:"detections"`
	Interventions int    `json:"interventions"`
	// LoopDetected is true when the run's last model call was answered
	// with LOOP_DETECTED: loopguard ended the loop.
	LoopDetected bool `json:"ended_with_loop_detected"`
	// StoppedBy says whether loopguard ended the run, and why: "loop"
	// (LOOP_DETECTED), "budget" (BUDGET_EXCEEDED), or "" when the run's
	// last model call was the upstream's (the agent ended on its own).
	StoppedBy string `json:"stopped_by"`
	// Budget is the session budget's last decision: the warning share
	// reached or the budget spent; absent without one.
	Budget *policy.BudgetUse `json:"budget,omitempty"`
	// Tokens is the usage the upstream reported for the run; LoopTokens
	// that of the answers to requests whose history showed a loop.
	Tokens     observe.Usage `json:"tokens"`
	LoopTokens observe.Usage `json:"loop_tokens"`
	// Upstream is where the run's chat and Responses traffic went, and
	// UpstreamReason why that one was chosen; empty with -proxy, whose
	// loopguard has its own.
	Upstream       string `json:"upstream,omitempty"`
	UpstreamReason string `json:"upstream_reason,omitempty"`
	// Timeline is the command that shows the session's timeline.
	Timeline string `json:"timeline,omitempty"`
	// Log is the file loopguard's log went to.
	Log string `json:"log"`
}

// Loop is one loop seen in the run.
type Loop struct {
	// Turn is the number of assistant turns in the history when it was seen.
	Turn     int    `json:"turn"`
	Category string `json:"category"`
	// Action is what loopguard did: warn, constrain, reset, terminate,
	// none (below the ladder or reapplied), shadow, or cut.
	Action string `json:"action"`
	Brief  string `json:"brief,omitempty"`
}

// sessionDetail is a session's record: the admin API's answer for one
// session, less the policy state.
type sessionDetail struct {
	Session  observe.SessionSummary `json:"session"`
	Timeline []observe.Entry        `json:"timeline"`
}

// record reads the run's session: from the recorder of the in-process
// loopguard, else from the admin API of the one at g.base. ok is false when
// the session was never seen (the command made no model call).
func (g *guard) record(ctx context.Context) (d sessionDetail, ok bool, err error) {
	if g.srv != nil {
		// Read in-process rather than over HTTP: an admin request just
		// before Shutdown races inside fasthttp (RequestCtx.Done reads
		// the server's done channel while Shutdown resets it).
		d.Session, d.Timeline, ok = g.srv.Recorder().Session(g.id)
		return d, ok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/loopguard/api/sessions/"+g.id, nil)
	if err != nil {
		return d, false, err
	}
	if g.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+g.adminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return d, false, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return d, false, nil
	case resp.StatusCode != http.StatusOK:
		return d, false, fmt.Errorf("admin API: %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&d); err != nil {
		return d, false, fmt.Errorf("admin API: %w", err)
	}
	return d, true, nil
}

// setBudget gives the run's session its own budget through the admin API
// of the loopguard the run goes through, in-process or not.
func (g *guard) setBudget(ctx context.Context, b policy.Budget) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(b)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/loopguard/api/sessions/"+g.id+"/budget", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if g.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+g.adminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("admin API: %s", resp.Status)
	}
	return nil
}

// fill copies a session's record into sum.
func fill(sum *Summary, d *sessionDetail) {
	s := &d.Session
	sum.Calls, sum.Detections, sum.Interventions = s.Requests, s.Detections, s.Interventions
	sum.Answered, sum.Refused, sum.FailedUpstream = s.Answered, s.Refused, s.Failed
	sum.Tokens, sum.LoopTokens = s.Tokens, s.LoopTokens
	var last *observe.Entry
	for i := range d.Timeline {
		e := &d.Timeline[i]
		switch e.Kind {
		case observe.KindRequest:
			last = e
			if e.Budget != nil {
				sum.Budget = e.Budget
			}
			if e.Category != "" {
				sum.Loops = append(sum.Loops, Loop{Turn: e.Steps, Category: string(e.Category), Action: action(e), Brief: e.Brief})
			}
		case observe.KindCut:
			sum.Loops = append(sum.Loops, Loop{Turn: -1, Category: string(e.Category), Action: "cut"})
		}
	}
	ended := last != nil && last.Action == policy.Terminate
	switch {
	case ended && last.Budget != nil && last.Budget.Exceeded:
		sum.StoppedBy = StoppedByBudget
	case ended:
		sum.StoppedBy = StoppedByLoop
		sum.LoopDetected = true
	}
}

// The values of Summary.StoppedBy.
const (
	StoppedByLoop   = "loop"
	StoppedByBudget = "budget"
)

// Exit codes of `loopguard run -exit-on-stop` when loopguard ended the run;
// the agent's own exit code is kept otherwise. They are above what agents
// use for their own failures and below the 126..165 that shells give to
// commands that could not start or died of a signal.
const (
	ExitLoopDetected   = 90
	ExitBudgetExceeded = 91
)

// StopExitCode returns the exit code of a run that ended as s says: the
// agent's own, unless stopExit is set and loopguard ended the run.
func (s *Summary) StopExitCode(stopExit bool) int {
	if stopExit {
		switch s.StoppedBy {
		case StoppedByLoop:
			return ExitLoopDetected
		case StoppedByBudget:
			return ExitBudgetExceeded
		}
	}
	return s.ExitCode
}

func action(e *observe.Entry) string {
	if e.Action == "" {
		return string(policy.None)
	}
	return string(e.Action)
}

// Print writes the summary for people, a few lines.
func (s *Summary) Print(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "loopguard: session %s: %d model calls%s, exit code %d\n", s.Session, s.Calls, s.ended(), s.ExitCode)
	if len(s.Loops) == 0 {
		b.WriteString("loopguard: no loop seen\n")
	}
	for _, l := range s.Loops {
		turn := "in the answer"
		if l.Turn >= 0 {
			turn = fmt.Sprintf("at turn %d", l.Turn)
		}
		fmt.Fprintf(&b, "loopguard: loop %s %s: %s", l.Category, turn, l.Action)
		if l.Brief != "" {
			fmt.Fprintf(&b, " (%s)", l.Brief)
		}
		b.WriteByte('\n')
	}
	if s.LoopDetected {
		b.WriteString("loopguard: the run was ended with LOOP_DETECTED\n")
	}
	if u := s.Budget; u != nil {
		if u.Exceeded {
			fmt.Fprintf(&b, "loopguard: the run was ended with BUDGET_EXCEEDED: %d of %d %s\n", u.Used, u.Limit, u.Kind)
		} else {
			fmt.Fprintf(&b, "loopguard: session budget warning at %d of %d %s\n", u.Used, u.Limit, u.Kind)
		}
	}
	fmt.Fprintf(&b, "loopguard: tokens reported by the upstream: %d in, %d out; in loop turns: %d in, %d out\n",
		s.Tokens.Input, s.Tokens.Output, s.LoopTokens.Input, s.LoopTokens.Output)
	if s.Upstream != "" {
		fmt.Fprintf(&b, "loopguard: upstream %s: %s\n", s.Upstream, s.UpstreamReason)
	}
	if s.Timeline != "" {
		fmt.Fprintf(&b, "loopguard: timeline: %s\n", s.Timeline)
	}
	_, _ = io.WriteString(w, b.String())
}

// ended says how the model calls ended, " (4 answered, 2 failed upstream)",
// leaving out the ways none did; "" for a run without calls.
func (s *Summary) ended() string {
	var parts []string
	for _, n := range []struct {
		count int
		how   string
	}{{s.Answered, "answered"}, {s.Refused, "refused"}, {s.FailedUpstream, "failed upstream"}} {
		if n.count > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n.count, n.how))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
