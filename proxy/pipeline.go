package proxy

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/judge"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// Response headers on every answer to a guarded request (docs/design.md section 4).
const (
	HeaderSession = "X-Loopguard-Session"
	HeaderAction  = "X-Loopguard-Action"
	HeaderLoop    = "X-Loopguard-Loop"
	// HeaderBudget names the session budget that decided the request,
	// "tokens" or "turns", and its use: "tokens 81200/100000".
	HeaderBudget = "X-Loopguard-Budget"
	headerMode   = "X-Loopguard-Mode"
)

// pipeline runs policy, inspect and inject on the requests of the guarded
// APIs, and watches their answers (answerObserver).
type pipeline struct {
	cfg    Config
	log    zerolog.Logger
	engine *inspect.Engine
	// cache keeps each session's parsed history, so that a turn parses
	// only its new messages (nil: detect.session_cache_mb = 0).
	cache  *inspect.SessionCache
	policy *policy.Policy
	inject *inject.Injector
	obs    *observe.Observer
	// storeTimeout bounds the policy's store calls of one request.
	storeTimeout time.Duration
	// chatEvents: the server reports each chat request's outcome
	// (WithChatDone), with the options of the request.
	chatEvents bool
	// localStore: the session store is in memory and never blocks, so its
	// calls need no deadline (a context with one costs a timer).
	localStore bool
	// judge is the optional judge, nil when off.
	judge *judge.Judge
	// judgeDone sees each check's outcome once it is settled (WithJudgeDone).
	judgeDone func(judge.Result)
}

func newPipeline(cfg Config, log zerolog.Logger, obs *observe.Observer) (*pipeline, error) {
	engine, err := inspect.NewEngine(cfg.Detect)
	if err != nil {
		return nil, fmt.Errorf("detect: %w", err)
	}
	in, err := inject.New(cfg.Inject)
	if err != nil {
		return nil, fmt.Errorf("inject: %w", err)
	}
	store, err := policy.NewStore(cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	pol := policy.New(cfg.Policy, store, log)
	_, local := store.(*policy.MemoryStore)
	cache := inspect.NewSessionCache(int64(cfg.Detect.SessionCacheMB) << 20)
	if cache != nil {
		obs.WatchSessionCache(cache.Stats)
	}
	p := &pipeline{
		cfg:          cfg,
		log:          log,
		engine:       engine,
		cache:        cache,
		policy:       pol,
		inject:       in,
		obs:          obs,
		storeTimeout: 4 * pol.Config().StoreTimeout,
		localStore:   local,
	}
	if cfg.Judge.Enabled {
		pol.SetJudgeMerge(engine.WithDetection)
		p.judge = judge.New(cfg.Judge, p.judged)
	}
	return p, nil
}

// Close stops the judge and releases the session store.
func (p *pipeline) Close() error {
	p.judge.Close()
	return p.policy.Close()
}

// plan is what the pipeline decided for one request.
type plan struct {
	api *wireAPI // the request's wire API
	requestFacts
	decision policy.Decision
	body     []byte           // the body to send upstream
	answer   *inject.Response // loopguard's own answer; the upstream is not called
	verdict  inspect.Verdict
	record   *recordPlan    // Responses API: the server-side history record, nil if none
	layout   inspect.Layout // where the messages lie in body (chat completions)
	// ownHistory: the judged history is body's own (not a Responses record
	// prepended to it), so the evidence's indices point into body.
	ownHistory bool
	buf        *[]byte       // pooled buffer body was built in, nil if none
	failOpen   observe.Stage // the stage that failed open, "" if none
	resume     *resumable    // how to stop a resumable stream on a cut, nil if none
	start      time.Time
	// check is the judge's check of this turn, submitted once the request
	// is forwarded (checkSent); nil when none is due.
	check     *judge.Job
	checkSent bool
}

// requestFacts is what a plan reads of the request itself: its session and
// the options that shape its answer. A decision that failed keeps them, so
// that the answer is still read as the request asked.
type requestFacts struct {
	key    string
	stream bool
	usage  bool // stream_options.include_usage
	maxTok int64
	// completionTokens is max_completion_tokens, which wins over
	// max_tokens once all options are read; -1 when absent.
	completionTokens int64
	// unread, when not 0, is where the history's value starts in the body:
	// readOptions stopped there, and the members after it are read by
	// finishOptions when something needs them.
	unread int
	model  string
	// passive: policy mode shadow or off; the answer is watched, never
	// changed (no cut, no trimmed or held events).
	passive bool
}

// guard serves one request of a guarded API: it decides, then answers
// LOOP_DETECTED itself or forwards the (rewritten) request and watches the
// answer.
func (p *pipeline) guard(ctx *fasthttp.RequestCtx, s *Server, api *wireAPI) {
	body := ctx.Request.Body()
	var coded *codedBody
	if ce := ctx.Request.Header.ContentEncoding(); len(ce) > 0 {
		var ok bool
		if coded, ok = p.decodeRequest(ctx, s, ce, body); !ok {
			return
		}
		if coded != nil {
			body = coded.decoded
			defer coded.release()
		}
	}
	pl := p.decide(ctx, api, body)
	if coded != nil && pl.answer == nil {
		// The upstream gets the body as the client coded it: the client's
		// own bytes when nothing changed, else the rewrite coded the same
		// way (its buffer is done with once coded).
		rewritten := pl.body
		pl.body = coded.wire(rewritten)
		if pl.buf != nil {
			*pl.buf = rewritten[:0]
			bodyBufs.Put(pl.buf)
			pl.buf = nil
		}
	}
	pl.start = time.Now()
	if pl.answer != nil {
		writeAnswer(ctx, pl.answer)
		setLoopHeaders(&ctx.Response.Header, &pl)
		s.respond(nil, ctx.Method(), ctx.Path(), nil, observe.ResponseInfo{Session: pl.key, Status: pl.answer.Status,
			Duration: time.Since(pl.start), Bytes: int64(len(pl.answer.Body))})
		if s.chatDone != nil {
			ev := pl.event()
			ev.Terminated, ev.Status = true, pl.answer.Status
			s.chatDone(&ev)
		}
		return
	}
	if pl.stream && !pl.passive {
		// Only an enforced answer is cut, and only a cut stops a resumable
		// stream; in mode off pl.stream may be unread.
		pl.resume = s.resumableOf(ctx)
	}
	s.forward(ctx, pl.body, newAnswerObserver(p, &pl, s.chatDone))
	// forward has sent the request (a stream is relayed from here on
	// without it), so the rewritten body's buffer can serve another.
	pl.releaseBody()
	p.submitCheck(&pl)
}

// submitCheck queues the judge's check of pl's turn, if one is due, once:
// after the turn is forwarded, never before it (Submit only queues). The
// check stays in pl for the turn's event.
func (p *pipeline) submitCheck(pl *plan) {
	if pl.check != nil && !pl.checkSent {
		pl.checkSent = true
		p.judge.Submit(*pl.check)
	}
}

// decodeRequest decodes a request body sent with Content-Encoding ce for
// inspection. ok false: the request is answered (the decoded body is over
// the body limit, 413 as for a plain body that is; or it does not fit in
// the body budget, 503 as for a plain body that does not). A body that does not
// decode is inspected as it is if it is JSON as it is (a wrong label);
// otherwise it is forwarded as sent, uninspected, and counted as a
// fail-open: ok false too. coded nil with ok: the coding is identity.
func (p *pipeline) decodeRequest(ctx *fasthttp.RequestCtx, s *Server, ce, raw []byte) (coded *codedBody, ok bool) {
	cs, err := parseCodings(ce)
	if err == nil && cs.empty() {
		return nil, true
	}
	if err == nil {
		coded, err = decodeBody(cs, raw, p.cfg.Server.MaxBodyBytes, heldBy(ctx))
	}
	switch {
	case errors.Is(err, errBodyMemory):
		writeBodyMemoryError(ctx)
		s.respond(nil, ctx.Method(), ctx.Path(), nil, observe.ResponseInfo{Status: fasthttp.StatusServiceUnavailable})
		return nil, false
	case errors.Is(err, errDecodedTooLarge):
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "decoded request body exceeds server.max_body_bytes",
			"invalid_request_error", "request_too_large")
		s.respond(nil, ctx.Method(), ctx.Path(), nil, observe.ResponseInfo{Status: fasthttp.StatusRequestEntityTooLarge})
		return nil, false
	case err != nil && looksJSONObject(raw):
		// Labelled with a coding it is not in: an upstream that ignores
		// the label serves it as it is, so it is inspected as it is (and
		// any rewrite goes with the same label).
		p.log.Debug().Bytes("content_encoding", ce).Msg("request body is plain JSON despite its Content-Encoding; inspected as it is")
		return nil, true
	case err != nil:
		// The upstream answers what it cannot read; loopguard only cannot
		// see this turn. The coding's name is logged, never the body.
		p.obs.FailOpen(observe.StageUndecodableBody)
		p.log.Warn().Str("stage", string(observe.StageUndecodableBody)).Bytes("content_encoding", ce).AnErr("error", err).
			Msg("fail open: request body cannot be decoded; passed through unchanged")
		s.forward(ctx, raw, nil)
		return nil, false
	}
	return coded, true
}

// releaseBody returns a rewritten body's buffer to the pool; pl.body must
// not be used afterwards. The plan of a stream lives as long as the stream:
// it lets go of the client's body too.
func (pl *plan) releaseBody() {
	if pl.buf != nil {
		*pl.buf = pl.body[:0]
		bodyBufs.Put(pl.buf)
	}
	pl.body, pl.buf = nil, nil
}

// bodyBufs hold rewritten request bodies: histories of hundreds of kilobytes
// would otherwise be allocated (and zeroed, and collected) per rewrite.
var bodyBufs = sync.Pool{New: func() any { return new([]byte) }}

// event is the ChatEvent of a plan, before the answer is known.
func (pl *plan) event() ChatEvent {
	ev := ChatEvent{
		Session:  pl.key,
		Model:    pl.model,
		Stream:   pl.stream,
		Verdict:  pl.verdict,
		Decision: pl.decision,
		FailOpen: string(pl.failOpen),
		Start:    pl.start,
		Duration: time.Since(pl.start),
	}
	if pl.check != nil {
		ev.JudgeDue, ev.JudgeStep = true, pl.check.Step
	}
	return ev
}

// decide runs the pipeline up to the upstream call. It fails open: whatever
// goes wrong, the plan falls back to sending the original body unchanged.
func (p *pipeline) decide(ctx *fasthttp.RequestCtx, api *wireAPI, body []byte) (pl plan) {
	pcfg := p.policy.Config()
	session, mode := clientHeaders(ctx, &pcfg)
	return p.decideFor(session, mode, api, body)
}

// decideFor is decide for a request whose session id (the /s/<id>/
// prefix's or a session header's, nil if none) and X-Loopguard-Mode were
// read already: a turn on a WebSocket has no request of its own, and
// takes both from the handshake.
func (p *pipeline) decideFor(header, modeHeader []byte, api *wireAPI, body []byte) (pl plan) {
	pl.api = api
	pl.body = body
	pl.decision.Action = policy.None
	defer func() {
		if r := recover(); r != nil {
			p.obs.FailOpen(observe.StagePanic)
			p.log.Error().Str("panic", panicText(r)).Bytes("stack", debug.Stack()).Msg("chat pipeline failed; request passed through unchanged")
			pl = plan{api: api, requestFacts: pl.requestFacts, body: body,
				decision: policy.Decision{Action: policy.None}, failOpen: observe.StagePanic}
		}
	}()
	var fields policy.Fields // what names the session, read with the options
	pl.stream = api.streamByDefault
	pl.readOptions(body, &fields, policy.Named(header))

	// Store calls before the inspection (the Responses record, the session
	// link) have a deadline of their own, and Decide's starts after it:
	// parsing a long history on a busy machine must not use up the store's
	// time.
	rctx, cancelRecord := p.storeContext()
	judged := body // the history to judge
	if api.history != nil {
		var failed bool
		if judged, pl.record, failed = api.history(p, rctx, body); failed {
			pl.failOpen = observe.StageStore
		}
	}
	own := len(judged) == len(body) && (len(body) == 0 || &judged[0] == &body[0])
	var id policy.Identity
	if own {
		id = policy.IdentifyFields(api.name, header, &fields)
	} else { // a Responses record went before the body
		id = policy.Identify(api.name, header, judged)
	}
	pl.key = p.policy.Session(rctx, id)
	cancelRecord()
	mode := p.policy.RequestMode(string(modeHeader))
	pl.passive = mode != policy.ModeEnforce
	if mode == policy.ModeOff {
		// Nothing of the answer reads the options past the history (it is
		// neither changed nor cut) but the chat event.
		if p.chatEvents {
			pl.finishOptions(body, -1)
		}
		return pl
	}

	t0 := time.Now()
	traj, err := p.engine.ParseSession(p.cache, pl.key, api.name, judged)
	historyEnd := -1
	if err == nil && own && traj.Layout.Messages[0] == pl.unread {
		historyEnd = traj.Layout.Messages[1] // the parse found the history's end
	}
	pl.finishOptions(body, historyEnd)
	if err != nil {
		p.failOpen(&pl, observe.StageUnreadableHistory, err)
		return pl
	}
	defer traj.Release() // the session's next turn extends its steps in place
	verdict := p.engine.Inspect(traj)
	if verdict.Err != nil {
		p.failOpen(&pl, observe.StageDetector, verdict.Err)
		return pl
	}
	pl.verdict = verdict
	if len(body) > 0 && own {
		pl.layout = traj.Layout // the offsets are of body itself
		pl.ownHistory = true
	}
	t1 := time.Now()

	sctx, cancel := p.storeContext()
	defer cancel()
	d, err := p.policy.Decide(sctx, pl.key, verdict, traj, mode)
	if err != nil {
		p.failOpen(&pl, observe.StagePolicy, err)
		return pl
	}
	pl.decision = d
	if d.StoreFailed {
		p.failOpen(&pl, observe.StageStore, nil)
	}
	if d.Judgement != nil && d.Verdict.Loop {
		pl.verdict = d.Verdict // the judge's finding counted
	}
	if p.judge != nil && pl.key != "" {
		p.planCheck(&pl, judged, traj)
	}
	// observe logs each detection and intervention (by pattern key and tool,
	// never the arguments) and counts it.
	info := observe.RequestInfo{Session: pl.key, Model: pl.model, API: api.name, Steps: len(traj.Steps),
		Transport: api.transport, DetectDuration: t1.Sub(t0), StoreDuration: time.Since(t1)}
	if n := len(traj.Steps); n > 0 {
		if calls := traj.Steps[n-1].Calls; len(calls) > 0 {
			info.Tool, info.Fingerprint = calls[len(calls)-1].Name, calls[len(calls)-1].Fingerprint
		}
	}
	defer func() {
		// The decision as it ended (a rewrite or an answer that failed
		// falls back to none), copied: a pointer into pl would move every
		// plan to the heap, mode off's included.
		d := pl.decision
		info.Decision = &d
		p.obs.Request(info)
	}()

	switch d.Action {
	case policy.Terminate:
		ans, err := api.terminate(p.inject, body, loopOf(&d, false))
		if err != nil {
			p.failOpen(&pl, observe.StageTerminate, err)
			pl.decision.Action = policy.None
			return pl
		}
		pl.answer = &ans
	case policy.None, policy.Shadow:
		if d.Action == policy.None && (d.Cut != nil || len(d.Constraints) > 0) {
			pl.body = p.rewrite(&pl, body, &d)
		}
	default:
		pl.body = p.rewrite(&pl, body, &d)
	}
	return pl
}

// planCheck prepares the judge's check of this turn when one is due. The
// digest is built now, while the trajectory is leased (it is released when
// decide returns); the call waits until the turn is forwarded.
func (p *pipeline) planCheck(pl *plan, history []byte, traj *inspect.Trajectory) {
	alert := pl.decision.Would != policy.None && pl.decision.Would != ""
	if !p.judge.Due(pl.key, len(traj.Steps), alert) {
		return
	}
	pl.check = &judge.Job{
		Session: pl.key,
		URL:     p.cfg.Upstream.URL,
		Digest:  judge.Digest(traj, judge.Task(history), p.judge.Config().MaxDigestBytes),
		Step:    len(traj.Steps) - 1,
	}
}

// judged stores a judge's verdict for the session's next request and
// reports the check. It runs on the judge's workers.
func (p *pipeline) judged(r judge.Result) {
	p.obs.Judge(observe.JudgeInfo{Session: r.Session, Step: r.Step, Outcome: string(r.Outcome),
		Stuck: r.Outcome == judge.Stuck, Confidence: r.Verdict.Confidence, What: r.Verdict.What,
		Latency: r.Latency, Tokens: r.Tokens})
	if p.judgeDone != nil {
		defer p.judgeDone(r)
	}
	if r.Outcome != judge.Stuck && r.Outcome != judge.NotStuck {
		return // fails open: nothing waits for the next request
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.storeTimeout)
	defer cancel()
	err := p.policy.RecordJudgement(ctx, r.Session, policy.Judgement{Stuck: r.Verdict.Stuck,
		Confidence: r.Verdict.Confidence, What: r.Verdict.What, Step: r.Step})
	if err != nil {
		p.log.Warn().Err(err).Str("session", r.Session).Msg("judge: verdict not stored")
	}
}

// storeContext bounds store calls by storeTimeout; a store in memory
// answers at once and gets no deadline.
func (p *pipeline) storeContext() (context.Context, context.CancelFunc) {
	if p.localStore {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), p.storeTimeout)
}

// readOptions reads the request options the answer depends on in one pass
// over the top-level members, and hands each member to session: "messages"
// may come first and be megabytes long, so one Get per option would scan it
// again each time, and rawjson.MembersWith skips it several times faster
// than gjson's ForEach. Skipping the history is still most of what policy
// mode off costs, so when the client named the session (named) and no
// session field of the body is needed, the pass stops at the history: the
// options past it are read by finishOptions, after the parse of the history
// has found its end, or not at all where nothing needs them (mode off).
func (pl *plan) readOptions(body []byte, session *policy.Fields, named bool) {
	s := rawjson.View(body)
	pl.completionTokens = -1
	rawjson.MembersWith(s, func(k string, at int) int {
		if named && pl.api.reg != nil && (k == pl.api.reg.History || pl.api.reg.Wrap != "" && k == pl.api.reg.Wrap) {
			pl.unread = at
			return -1
		}
		return pl.readOption(s, k, at, session)
	})
	pl.settleOptions()
}

// finishOptions reads the members past the history where readOptions
// stopped; end is the index just past the history's value when known, else
// -1 (it is skipped).
func (pl *plan) finishOptions(body []byte, end int) {
	if pl.unread == 0 {
		return
	}
	s := rawjson.View(body)
	if end < 0 {
		end = rawjson.ValueEnd(s, pl.unread)
	}
	pl.unread = 0
	rawjson.MembersAfter(s, end, func(k string, at int) int { return pl.readOption(s, k, at, nil) })
	pl.settleOptions()
}

// readOption reads the member k whose value starts at s[at] and returns the
// index past the value (-1: there is none); session, when not nil, gets it
// too.
func (pl *plan) readOption(s, k string, at int, session *policy.Fields) int {
	end := rawjson.ValueEnd(s, at)
	if end <= at {
		return -1
	}
	raw := s[at:end]
	if session != nil {
		session.Add(k, raw)
	}
	switch k {
	case "stream":
		pl.stream = gjson.Parse(raw).Bool()
	case "stream_options":
		pl.usage = gjson.Get(raw, "include_usage").Bool()
	case "model":
		pl.model = strings.Clone(gjson.Parse(raw).String()) // outlives the request body
	case "max_tokens", "max_output_tokens":
		pl.maxTok = gjson.Parse(raw).Int()
	case "max_completion_tokens":
		pl.completionTokens = gjson.Parse(raw).Int()
	case "options": // Ollama's: num_predict bounds the answer
		if n := gjson.Get(raw, "num_predict"); n.Exists() {
			pl.maxTok = n.Int()
		}
	}
	return end
}

// settleOptions gives max_completion_tokens precedence over max_tokens.
func (pl *plan) settleOptions() {
	if pl.completionTokens >= 0 {
		pl.maxTok = pl.completionTokens
	}
}

// rewrite applies the decision's texts to body, or returns body unchanged
// when inject cannot patch it.
func (p *pipeline) rewrite(pl *plan, body []byte, d *policy.Decision) []byte {
	buf := bodyBufs.Get().(*[]byte)
	e := inject.Edit{Model: pl.model, Layout: pl.layout, Dst: *buf}
	if d.Cut != nil {
		e.Degenerated = &inject.Degeneration{Category: d.Cut.Category}
	}
	// Collapsing reads the evidence's indices against body: a Responses
	// history judged with its server-side record prepended is kept whole.
	collapse := d.Collapse && pl.ownHistory
	current := false
	for _, c := range d.Constraints {
		if c.Pattern == d.Pattern && (d.Action == policy.Constrain || d.Action == policy.Reset) {
			current = true
			e.Constraints = append(e.Constraints, loopOf(d, collapse))
			continue
		}
		e.Constraints = append(e.Constraints, activeConstraint(c))
	}
	if !current {
		switch d.Action {
		case policy.Warn:
			if d.Verdict.Loop {
				e.Warnings = append(e.Warnings, loopOf(d, false))
			}
		case policy.Constrain, policy.Reset:
			e.Constraints = append(e.Constraints, loopOf(d, collapse))
		}
	}
	if b := d.Budget; b != nil && !b.Exceeded {
		e.Warnings = append(e.Warnings, inject.Loop{Budget: budgetOf(b)})
	}
	res, err := pl.api.apply(p.inject, body, e)
	if err != nil {
		bodyBufs.Put(buf)
		p.failOpen(pl, observe.StageInject, err)
		return body
	}
	if len(res.Body) > 0 && len(body) > 0 && &res.Body[0] != &body[0] {
		// A body of our own, built in buf or newly allocated: it goes back
		// to the pool once the upstream call has sent it (guard).
		*buf = res.Body
		pl.buf = buf
	} else {
		bodyBufs.Put(buf)
	}
	if res.Collapsed.Saved > 0 {
		p.log.Info().Int("turns_removed", res.Collapsed.Turns).Int("bytes_saved", res.Collapsed.Saved).Msg("history collapsed")
	}
	return res.Body
}

// loopOf turns policy's decision into inject's view of the current loop.
func loopOf(d *policy.Decision, collapse bool) inject.Loop {
	l := inject.Loop{
		Verdict:  d.Verdict,
		Urgency:  inject.Urgency(d.Urgency),
		Collapse: collapse,
		Failed:   d.Failed,
	}
	if d.Budget != nil && d.Budget.Exceeded {
		l.Budget = budgetOf(d.Budget)
	}
	if d.CrossSession && d.GlobalSessions > 1 {
		l.OtherSessions = d.GlobalSessions - 1
	}
	return l
}

// activeConstraint re-renders the block of a pattern constrained on an
// earlier request whose loop has not stopped yet.
func activeConstraint(c policy.Constraint) inject.Loop {
	ev := inspect.Evidence{Element: c.Brief, Tool: c.Tool, Args: c.Args}
	return inject.Loop{Verdict: inspect.Verdict{
		Loop:       true,
		Category:   c.Category,
		PatternKey: c.Pattern,
		Detections: []inspect.Detection{{Category: c.Category, Score: 1, Evidence: ev}},
	}}
}

func (p *pipeline) failOpen(pl *plan, stage observe.Stage, err error) {
	if pl != nil {
		pl.failOpen = stage
	}
	p.obs.FailOpen(stage)
	p.log.Warn().Str("stage", string(stage)).AnErr("error", err).Msg("fail open: request passed through unchanged")
}

// setLoopHeaders adds loopguard's headers to the answer to a guarded request.
func setLoopHeaders(h *fasthttp.ResponseHeader, pl *plan) {
	if pl.key != "" {
		h.Set(HeaderSession, pl.key)
	}
	h.Set(HeaderAction, string(pl.decision.Action))
	// A stale loop (all of it before an earlier intervention) was left
	// alone; the header names loops loopguard acts on or would act on.
	if v := pl.decision.Verdict; v.Loop && !pl.decision.Stale {
		h.Set(HeaderLoop, string(v.Category))
	}
	if b := pl.decision.Budget; b != nil {
		h.Set(HeaderBudget, b.Kind+" "+strconv.FormatInt(b.Used, 10)+"/"+strconv.FormatInt(b.Limit, 10))
	}
}

// writeAnswer copies loopguard's own answer onto the response.
func writeAnswer(ctx *fasthttp.RequestCtx, a *inject.Response) {
	ctx.Response.Reset()
	ctx.SetStatusCode(a.Status)
	for _, h := range a.Header {
		ctx.Response.Header.Set(h.Name, h.Value)
	}
	if strings.HasPrefix(string(ctx.Response.Header.ContentType()), "text/event-stream") {
		ctx.Response.Header.Set("X-Accel-Buffering", "no")
	}
	ctx.SetBody(a.Body)
}
