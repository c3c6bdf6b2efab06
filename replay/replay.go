// Package replay evaluates loopguard offline: it sends recorded chat requests
// through the real proxy, in front of an in-process upstream that plays each
// record's recorded answer, and reports what loopguard did with each one.
//
// It is the `loopguard replay` subcommand. Because the requests go through
// proxy.Server over loopback, replay measures exactly the code path of the
// live proxy: session keys, detectors, the ladder, injection and stream cuts.
//
// With the judge on ([judge] enabled) replay calls the configured judge
// endpoint (judge.url, else the configured upstream.url: the in-process
// upstream only plays records). A live judge answers after the turn and its
// verdict counts on whichever request comes next; replay instead waits for a
// due check to finish, bounded by judge.timeout, before the next record, so
// a verdict lands on the same record on every run. The judge's per-minute
// budgets are lifted for the same reason: records carry no time, and replay
// sends them as fast as it can, one call to the judge at a time.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/judge"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/proxy"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// Record is one input case.
type Record struct {
	ID string `json:"id"`
	// Request is the chat request body, as the agent sent it.
	Request json.RawMessage `json:"request"`
	// ResponseSSE, when set, is the raw SSE text the upstream answers with;
	// otherwise it answers with a plain assistant message.
	ResponseSSE string `json:"response_sse,omitempty"`
	// Expect is "loop" or "no_loop", for the summary.
	Expect string `json:"expect,omitempty"`
	// Session, when set, is sent as the session header, so records of one
	// session escalate along one ladder.
	Session string `json:"session,omitempty"`
	// API is a registry API's name (internal/wireapi: "chat", "responses",
	// "anthropic", "ollama", "gemini", "code_assist", ...); empty: told from the
	// request's shape.
	API string `json:"api,omitempty"`
}

// Result is one output line.
type Result struct {
	ID         string  `json:"id"`
	Action     string  `json:"action"`
	Loop       bool    `json:"loop"`
	Category   string  `json:"category,omitempty"`
	Confidence float64 `json:"confidence"`
	Pattern    string  `json:"pattern,omitempty"`
	Cut        *Cut    `json:"cut"`
	// Judge is the outcome of the judge's check of this record's turn
	// ("stuck", "not_stuck", "timeout", ...), "" when none was due: its
	// verdict counts on the session's next record.
	Judge  string `json:"judge,omitempty"`
	Expect string `json:"expect,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Cut describes a stream loopguard cut.
type Cut struct {
	Category string `json:"category"`
	Offset   int64  `json:"offset"`
}

// Summary is the last output line when records carry expectations.
type Summary struct {
	Records           int     `json:"records"`
	Labelled          int     `json:"labelled"`
	TruePositives     int     `json:"tp"`
	FalsePositives    int     `json:"fp"`
	TrueNegatives     int     `json:"tn"`
	FalseNegatives    int     `json:"fn"`
	Precision         float64 `json:"precision"`
	Recall            float64 `json:"recall"`
	FalsePositiveRate float64 `json:"false_positive_rate"`
}

// ErrInput reports input replay cannot read.
var ErrInput = errors.New("replay: unreadable input")

// ReadRecords reads JSONL, or a JSON file holding one record or an array of them.
func ReadRecords(r io.Reader) ([]Record, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInput, err)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, nil
	}
	if trimmed[0] == '[' {
		var recs []Record
		if err := json.Unmarshal(trimmed, &recs); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInput, err)
		}
		return recs, checkRecords(recs, 0)
	}
	// One object, or one object per line.
	var one Record
	if err := json.Unmarshal(trimmed, &one); err == nil {
		return []Record{one}, checkRecords([]Record{one}, 0)
	}
	var recs []Record
	sc := bufio.NewScanner(bytes.NewReader(trimmed))
	sc.Buffer(nil, len(trimmed)+1) // a record may be one multi-megabyte line
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrInput, line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInput, err)
	}
	return recs, checkRecords(recs, 1)
}

func checkRecords(recs []Record, firstLine int) error {
	for i, r := range recs {
		if len(bytes.TrimSpace(r.Request)) == 0 || r.Request[0] != '{' {
			return fmt.Errorf("%w: record %d (%q): request must be a JSON object", ErrInput, i+firstLine, r.ID)
		}
		if r.API != "" && wireapi.Lookup(wireapi.Name(r.API)) == nil {
			return fmt.Errorf("%w: record %d (%q): api must be one of %s, got %q", ErrInput, i+firstLine, r.ID, apiNames(), r.API)
		}
		if r.Expect != "" && r.Expect != "loop" && r.Expect != "no_loop" {
			return fmt.Errorf("%w: record %d (%q): expect must be loop or no_loop, got %q", ErrInput, i+firstLine, r.ID, r.Expect)
		}
	}
	return nil
}

// Runner replays records through one proxy. Create it with New and Close it.
type Runner struct {
	srv      *proxy.Server
	base     string
	client   *http.Client
	upstream *http.Server
	upLn     net.Listener
	header   string

	mu      sync.Mutex
	current *Record
	events  chan proxy.ChatEvent
	// judged receives each judge check's outcome; judgeWait bounds the
	// wait for one (the judge's timeout and some slack for its queue).
	judged    chan judge.Result
	judgeWait time.Duration
}

// New starts the in-process upstream and a proxy configured by cfg in front
// of it, both on loopback. cfg's upstream and store settings are replaced:
// replay never talks to a real model or a shared session store.
func New(cfg proxy.Config) (*Runner, error) {
	r := &Runner{events: make(chan proxy.ChatEvent, 1), judged: make(chan judge.Result, 16)}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.upLn = upLn
	r.upstream = &http.Server{Handler: http.HandlerFunc(r.answer), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.upstream.Serve(upLn) }()

	if cfg.Judge.Enabled {
		if cfg.Judge.URL == "" {
			// The judge asks the session's own upstream by default: here
			// that is the configured one, not the player of records.
			cfg.Judge.URL = cfg.Upstream.URL
		}
		if cfg.Judge.URL == "" {
			r.Close()
			return nil, errors.New("replay: the judge needs judge.url or upstream.url")
		}
		const unbounded = 1 << 30
		cfg.Judge.SessionCallsPerMinute, cfg.Judge.CallsPerMinute = unbounded, unbounded
		cfg.Judge.SessionTokensPerMinute, cfg.Judge.TokensPerMinute = unbounded, unbounded
		timeout := cfg.Judge.Timeout
		if timeout <= 0 {
			timeout = judge.DefaultConfig().Timeout
		}
		r.judgeWait = timeout + 5*time.Second
	}
	cfg.Upstream.URL = "http://" + upLn.Addr().String()
	cfg.Upstream.APIKey = ""
	cfg.Policy.Store = policy.StoreMemory
	cfg.Policy.RedisURL = ""
	if err := cfg.Validate(); err != nil {
		r.Close()
		return nil, err
	}
	r.header = cfg.Policy.SessionHeader
	if r.header == "" {
		r.header = policy.DefaultSessionHeader
	}
	r.srv, err = proxy.New(cfg, zerolog.Nop(), proxy.WithChatDone(func(ev *proxy.ChatEvent) {
		r.events <- *ev
	}), proxy.WithJudgeDone(func(res judge.Result) {
		select {
		case r.judged <- res:
		default: // nobody waits for it: a check replay did not see due
		}
	}))
	if err != nil {
		r.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.Close()
		return nil, err
	}
	r.base = "http://" + ln.Addr().String()
	go func() { _ = r.srv.Serve(ln) }()
	r.client = &http.Client{Timeout: time.Minute}
	return r, nil
}

// Close stops the proxy and the upstream.
func (r *Runner) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r.srv != nil {
		_ = r.srv.Shutdown(ctx)
	}
	if r.upstream != nil {
		_ = r.upstream.Shutdown(ctx)
	}
	if r.client != nil {
		r.client.CloseIdleConnections()
	}
}

// answer is the in-process upstream: it plays the current record.
func (r *Runner) answer(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	rec := r.current
	r.mu.Unlock()
	if rec != nil && rec.ResponseSSE != "" {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		// Event by event, as a server generates them, so a cut can land
		// before the end and the proxy sees the stream as it would live.
		text := rec.ResponseSSE
		for len(text) > 0 {
			i := strings.Index(text, "\n\n")
			if i < 0 {
				i = len(text) - 2
			}
			if _, err := io.WriteString(w, text[:i+2]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			text = text[i+2:]
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"chatcmpl-replay","object":"chat.completion","created":0,"model":"replay","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":0,"completion_tokens":1,"total_tokens":1}}`)
}

// apiNames lists the registry's API names, for an error.
func apiNames() string {
	names := make([]string, len(wireapi.APIs))
	for i := range wireapi.APIs {
		names[i] = string(wireapi.APIs[i].Name)
	}
	return strings.Join(names, ", ")
}

// Run replays one record and returns its result.
func (r *Runner) Run(rec Record) Result {
	res := Result{ID: rec.ID, Expect: rec.Expect, Action: string(policy.None)}
	r.mu.Lock()
	r.current = &rec
	r.mu.Unlock()
	api := inspect.API(rec.API)
	if api == "" {
		api = inspect.DetectAPI("", rec.Request)
	}
	model := gjson.GetBytes(rec.Request, "model").String()
	if model == "" {
		model = "replay" // an API with the model in its path (Gemini's) needs one
	}
	path := wireapi.Lookup(api).ReplayPath(model)
	req, err := http.NewRequest(http.MethodPost, r.base+path, bytes.NewReader(rec.Request))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	if rec.Session != "" {
		req.Header.Set(r.header, rec.Session)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case ev := <-r.events:
		res.fill(&ev)
		if ev.JudgeDue {
			res.Judge = r.awaitJudge(ev.Session, ev.JudgeStep)
		}
	case <-time.After(10 * time.Second):
		res.Error = "no decision reported by the proxy"
	}
	return res
}

// awaitJudge waits for the outcome of the judge's check of step of session
// key, so that its verdict is stored before the next record is sent, and
// returns it; "timeout" when none came within r.judgeWait.
func (r *Runner) awaitJudge(key string, step int) string {
	deadline := time.NewTimer(r.judgeWait)
	defer deadline.Stop()
	for {
		select {
		case res := <-r.judged:
			if res.Session == key && res.Step == step {
				return string(res.Outcome)
			}
		case <-deadline.C:
			return string(judge.Timeout)
		}
	}
}

func (res *Result) fill(ev *proxy.ChatEvent) {
	d := ev.Decision
	res.Action = string(d.Action)
	if res.Action == "" {
		res.Action = string(policy.None)
	}
	if ev.Verdict.Loop {
		res.Loop = true
		res.Category = string(ev.Verdict.Category)
		res.Confidence = ev.Verdict.Confidence
		res.Pattern = ev.Verdict.Brief()
	}
	if ev.Cut != nil {
		res.Cut = &Cut{Category: string(ev.Cut.Category), Offset: ev.CutOffset}
		if !res.Loop {
			res.Loop = true
			res.Category = string(ev.Cut.Category)
			res.Confidence = ev.Cut.Score
			res.Pattern = ev.Cut.Evidence.Element
		}
	}
	if ev.FailOpen != "" {
		res.Error = "fail open: " + ev.FailOpen
	}
}

// Summarize computes the confusion matrix of labelled results.
func Summarize(results []Result) Summary {
	s := Summary{Records: len(results)}
	for _, r := range results {
		switch {
		case r.Expect == "loop" && r.Loop:
			s.TruePositives++
		case r.Expect == "loop":
			s.FalseNegatives++
		case r.Expect == "no_loop" && r.Loop:
			s.FalsePositives++
		case r.Expect == "no_loop":
			s.TrueNegatives++
		default:
			continue
		}
		s.Labelled++
	}
	if n := s.TruePositives + s.FalsePositives; n > 0 {
		s.Precision = float64(s.TruePositives) / float64(n)
	}
	if n := s.TruePositives + s.FalseNegatives; n > 0 {
		s.Recall = float64(s.TruePositives) / float64(n)
	}
	if n := s.FalsePositives + s.TrueNegatives; n > 0 {
		s.FalsePositiveRate = float64(s.FalsePositives) / float64(n)
	}
	return s
}

// Main is the replay subcommand: it reads every file, replays its records in
// order, writes one JSON line per record and, when records carry expect, a
// summary line. It returns the exit code: 0 unless input cannot be read.
func Main(cfg proxy.Config, files []string, stdout, stderr io.Writer) int {
	var recs []Record
	for _, f := range files {
		var rd io.Reader
		if f == "-" {
			rd = os.Stdin
		} else {
			fh, err := os.Open(f)
			if err != nil {
				return inputError(stderr, fmt.Errorf("%w: %v", ErrInput, err))
			}
			defer fh.Close()
			rd = fh
		}
		rs, err := ReadRecords(rd)
		if err != nil {
			return inputError(stderr, fmt.Errorf("%s: %w", f, err))
		}
		recs = append(recs, rs...)
	}
	r, err := New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "loopguard replay: %v\n", err)
		return 2
	}
	defer r.Close()
	enc := json.NewEncoder(stdout)
	results := make([]Result, 0, len(recs))
	for i, rec := range recs {
		if rec.ID == "" {
			rec.ID = fmt.Sprintf("#%d", i+1)
		}
		res := r.Run(rec)
		results = append(results, res)
		_ = enc.Encode(res)
	}
	if s := Summarize(results); s.Labelled > 0 {
		_ = enc.Encode(struct {
			Summary Summary `json:"summary"`
		}{s})
	}
	return 0
}

// inputError reports unreadable input as an OpenAI-shaped error and returns
// the exit code.
func inputError(w io.Writer, err error) int {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": err.Error(), "type": "invalid_request_error", "code": "unreadable_input",
	}})
	fmt.Fprintf(w, "%s\n", b)
	return 2
}
