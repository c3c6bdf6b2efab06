package judge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Verdict is what the judge said of a trajectory.
type Verdict struct {
	Stuck bool
	// Confidence is the judge's confidence that the agent is stuck, in
	// [0,1].
	Confidence float64
	// What names the repeated approach in the judge's words, shortened:
	// for the timeline and the log only, never for the agent (a judge can
	// be steered by the history it reads; policy's judgedEvidence).
	What string
}

// Outcome says how one check ended; the strings are metrics labels.
type Outcome string

// Outcomes of a check. Only Stuck and NotStuck are verdicts; every other
// outcome changes nothing (the judge fails open).
const (
	Stuck       Outcome = "stuck"
	NotStuck    Outcome = "not_stuck"
	Failed      Outcome = "failed"      // the endpoint could not be reached or answered an error
	Timeout     Outcome = "timeout"     // no answer within Config.Timeout
	Unparseable Outcome = "unparseable" // an answer that holds no verdict
	QueueFull   Outcome = "queue_full"  // dropped: every worker busy and the queue full
	OverBudget  Outcome = "over_budget" // skipped: a calls or tokens budget was spent
)

// Job is one check: a session's digest and where to send it.
type Job struct {
	Session string
	// URL is the endpoint's base URL when Config.URL is empty (the
	// session's upstream).
	URL    string
	Digest string
	// Step is the index of the last step in the digest.
	Step int
}

// Result is one check's outcome, handed to the hook given to New.
type Result struct {
	Session string
	Step    int
	Outcome Outcome
	Verdict Verdict       // set for Stuck and NotStuck
	Latency time.Duration // of the call; 0 when none was made
	Tokens  int           // the usage reported (or estimated) for the call
	Err     error         // why a call failed, without content
}

// Judge schedules checks, keeps the budgets and runs the calls. It is safe
// for concurrent use; its workers run until Close.
type Judge struct {
	cfg    Config
	client *http.Client
	done   func(Result)
	jobs   chan Job
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	now    func() time.Time

	mu       sync.Mutex
	sessions map[string]*schedule
	global   window
}

// schedule is one session's place in the judge's rhythm.
type schedule struct {
	next     int  // the step count at which the next check is due
	doubtful bool // the last verdict was stuck with at least Config.Doubt
	budget   window
}

// window counts calls and tokens spent in the current minute.
type window struct {
	start  time.Time
	calls  int
	tokens int
}

func (w *window) roll(now time.Time) {
	if now.Sub(w.start) >= time.Minute {
		*w = window{start: now}
	}
}

// maxSessions bounds the schedules kept; the oldest are forgotten past it
// (a forgotten session is checked again from scratch).
const maxSessions = 20000

// New starts a judge whose workers report each check to done (from their
// own goroutines; done must not block for long). cfg's zero fields take
// their defaults. It returns nil when cfg is not Enabled.
func New(cfg Config, done func(Result)) *Judge {
	if !cfg.Enabled {
		return nil
	}
	d := DefaultConfig()
	for _, f := range []struct{ v, def *int }{
		{&cfg.MinTurns, &d.MinTurns}, {&cfg.Every, &d.Every}, {&cfg.EveryDoubtful, &d.EveryDoubtful},
		{&cfg.SessionCallsPerMinute, &d.SessionCallsPerMinute}, {&cfg.SessionTokensPerMinute, &d.SessionTokensPerMinute},
		{&cfg.CallsPerMinute, &d.CallsPerMinute}, {&cfg.TokensPerMinute, &d.TokensPerMinute},
		{&cfg.MaxDigestBytes, &d.MaxDigestBytes}, {&cfg.MaxTokens, &d.MaxTokens}, {&cfg.Workers, &d.Workers}, {&cfg.Queue, &d.Queue},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	if done == nil {
		done = func(Result) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &Judge{
		cfg:      cfg,
		client:   &http.Client{Timeout: cfg.Timeout},
		done:     done,
		jobs:     make(chan Job, cfg.Queue),
		ctx:      ctx,
		cancel:   cancel,
		now:      time.Now,
		sessions: make(map[string]*schedule),
	}
	for range cfg.Workers {
		j.wg.Add(1)
		go j.work()
	}
	return j
}

// Config returns the configuration in use, defaults filled in.
func (j *Judge) Config() Config { return j.cfg }

// Close stops the workers, abandoning the calls in flight and the queued
// checks, and waits for them to return.
func (j *Judge) Close() {
	if j == nil {
		return
	}
	j.cancel()
	j.wg.Wait()
}

// Due reports whether session key, whose history has steps assistant
// turns, is due for a check now, and if so reserves the budget for it: the
// caller then builds the digest and calls Submit. alert says this turn
// warned or constrained the session: the next check comes sooner. A check
// that is due but over a budget is reported as OverBudget and skipped.
func (j *Judge) Due(key string, steps int, alert bool) bool {
	if j == nil || steps < j.cfg.MinTurns {
		return false
	}
	now := j.now()
	j.mu.Lock()
	s := j.sessions[key]
	if s == nil {
		if len(j.sessions) >= maxSessions {
			j.forget(now)
		}
		s = &schedule{}
		j.sessions[key] = s
	}
	if steps < s.next-j.cfg.Every {
		// A shorter history: the agent compacted it, or a new run took the
		// key. Judge it on its own rhythm again.
		s.next = 0
	}
	if alert && s.next > steps+j.cfg.EveryDoubtful {
		s.next = steps + j.cfg.EveryDoubtful
	}
	if steps < s.next {
		j.mu.Unlock()
		return false
	}
	every := j.cfg.Every
	if alert || s.doubtful {
		every = j.cfg.EveryDoubtful
	}
	s.next = steps + every
	est := j.estimate()
	s.budget.roll(now)
	j.global.roll(now)
	over := s.budget.calls >= j.cfg.SessionCallsPerMinute || s.budget.tokens+est > j.cfg.SessionTokensPerMinute ||
		j.global.calls >= j.cfg.CallsPerMinute || j.global.tokens+est > j.cfg.TokensPerMinute
	if !over {
		s.budget.calls++
		s.budget.tokens += est
		j.global.calls++
		j.global.tokens += est
	}
	j.mu.Unlock()
	if over {
		j.done(Result{Session: key, Step: steps - 1, Outcome: OverBudget})
		return false
	}
	return true
}

// forget drops the schedules idle for longest. j.mu is held.
func (j *Judge) forget(now time.Time) {
	for k, s := range j.sessions {
		if now.Sub(s.budget.start) > 10*time.Minute || len(j.sessions) > maxSessions/2 {
			delete(j.sessions, k)
		}
	}
}

// estimate is the tokens a call is assumed to cost before its usage is
// known: a full digest and the prompt at about four bytes a token, and the
// longest answer.
func (j *Judge) estimate() int {
	return (j.cfg.MaxDigestBytes+len(systemPrompt))/4 + j.cfg.MaxTokens
}

// Submit queues job without waiting. A full queue drops it, reported as
// QueueFull; false then.
func (j *Judge) Submit(job Job) bool {
	if j == nil {
		return false
	}
	select {
	case j.jobs <- job:
		return true
	default:
		j.done(Result{Session: job.Session, Step: job.Step, Outcome: QueueFull})
		return false
	}
}

func (j *Judge) work() {
	defer j.wg.Done()
	for {
		select {
		case <-j.ctx.Done():
			return
		case job := <-j.jobs:
			r := j.check(j.ctx, job)
			if j.ctx.Err() != nil {
				return // closing: a call cut short is no outcome
			}
			j.settle(&r)
			j.done(r)
		}
	}
}

// settle corrects the budgets by the tokens the call really cost, and
// remembers whether the verdict was doubtful.
func (j *Judge) settle(r *Result) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delta := r.Tokens - j.estimate()
	j.global.tokens = max(0, j.global.tokens+delta)
	if s := j.sessions[r.Session]; s != nil {
		s.budget.tokens = max(0, s.budget.tokens+delta)
		s.doubtful = r.Outcome == Stuck && r.Verdict.Confidence >= j.cfg.Doubt
	}
}

// check makes one call and reads its verdict.
func (j *Judge) check(ctx context.Context, job Job) Result {
	r := Result{Session: job.Session, Step: job.Step}
	ctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
	defer cancel()
	body := requestBody(j.cfg.Model, job.Digest, j.cfg.MaxTokens)
	r.Tokens = j.estimate()
	url := j.cfg.URL
	if url == "" {
		url = job.URL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, Endpoint(url), bytes.NewReader(body))
	if err != nil {
		r.Outcome, r.Err = Failed, err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	if j.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+j.cfg.APIKey)
	}
	t0 := time.Now()
	resp, err := j.client.Do(req)
	if err == nil {
		defer resp.Body.Close()
		var raw []byte
		raw, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		r.Latency = time.Since(t0)
		if err == nil {
			if resp.StatusCode != http.StatusOK {
				r.Outcome, r.Err = Failed, fmt.Errorf("judge: status %d", resp.StatusCode)
				return r
			}
			content, tokens := readAnswer(raw)
			if tokens > 0 {
				r.Tokens = tokens
			}
			v, ok := ParseVerdict(content)
			if !ok {
				r.Outcome, r.Err = Unparseable, ErrUnparseable
				return r
			}
			r.Verdict, r.Outcome = v, NotStuck
			if v.Stuck {
				r.Outcome = Stuck
			}
			return r
		}
	}
	r.Latency = time.Since(t0)
	r.Outcome, r.Err = Failed, err
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		r.Outcome = Timeout
	}
	return r
}

// ErrUnparseable is a Result's Err when the answer held no verdict.
var ErrUnparseable = errors.New("judge: the answer holds no verdict")

// Endpoint turns a base URL (with or without /v1) into its chat
// completions URL; a URL that names it already is kept.
func Endpoint(base string) string {
	base = strings.TrimRight(base, "/")
	switch {
	case strings.HasSuffix(base, "/chat/completions"):
		return base
	case strings.HasSuffix(base, "/v1"):
		return base + "/chat/completions"
	}
	return base + "/v1/chat/completions"
}

// readAnswer returns the message content of a chat completion and the
// tokens its usage reports (0 when none).
func readAnswer(raw []byte) (string, int) {
	var a struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			Total      int `json:"total_tokens"`
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(raw, &a) != nil || len(a.Choices) == 0 {
		return "", 0
	}
	tokens := a.Usage.Total
	if tokens == 0 {
		tokens = a.Usage.Prompt + a.Usage.Completion
	}
	return a.Choices[0].Message.Content, tokens
}

// ParseVerdict reads the judge's JSON verdict from content. An endpoint
// that ignores response_format may wrap it in prose or a code fence: the
// outermost object is read. ok is false when there is none, or it lacks
// "stuck" or a numeric "confidence".
func ParseVerdict(content string) (v Verdict, ok bool) {
	i, k := strings.IndexByte(content, '{'), strings.LastIndexByte(content, '}')
	if i < 0 || k < i {
		return v, false
	}
	var a struct {
		Stuck       *bool    `json:"stuck"`
		Confidence  *float64 `json:"confidence"`
		WhatRepeats string   `json:"what_repeats"`
	}
	if json.Unmarshal([]byte(content[i:k+1]), &a) != nil || a.Stuck == nil || a.Confidence == nil {
		return v, false
	}
	c := *a.Confidence
	if c != c { // NaN
		return v, false
	}
	v = Verdict{Stuck: *a.Stuck, Confidence: min(max(c, 0), 1), What: oneLine(a.WhatRepeats, 200)}
	if !v.Stuck {
		v.Confidence = 0 // how sure it is of no loop says nothing of a loop
	}
	return v, true
}
