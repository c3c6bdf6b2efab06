package inspect

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Engine runs the detectors with one configuration. It is safe for
// concurrent use: it holds only the validated configuration and compiled
// patterns, and per-call working memory comes from a pool.
type Engine struct {
	cfg      Config
	patterns []*regexp.Regexp
	pool     sync.Pool // *work
	// ignoreLower holds Config.Ignore's names lowered, when they are all
	// ASCII (see ignored); nil otherwise. ignoreLens has bit n set when
	// one is n bytes long, ignoreFirst byte c when one begins with c.
	ignoreLower map[string]bool
	ignoreLens  uint64
	ignoreFirst [256]bool
	// toolIgnore is set when a Config.Tools override ignores its tool.
	toolIgnore bool
}

// NewEngine validates cfg and returns an engine. All problems are reported
// together, each by its TOML key.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg}
	for _, p := range cfg.ErrorPatterns {
		e.patterns = append(e.patterns, regexp.MustCompile(p)) // validated above
	}
	e.pool.New = func() any { return &work{} }
	if !slices.ContainsFunc(cfg.Ignore, func(n string) bool { return !isASCII(n) }) {
		e.ignoreLower = map[string]bool{}
		for _, n := range cfg.Ignore {
			e.ignoreLower[strings.ToLower(n)] = true
			e.ignoreLens |= 1 << min(len(n), 63)
			if n != "" {
				e.ignoreFirst[lowerASCII(n[0])] = true
			}
		}
	}
	for _, o := range cfg.Tools {
		e.toolIgnore = e.toolIgnore || o.Ignore
	}
	return e, nil
}

// ignored is Config.ignored without folding the name against each ignored
// one: the detectors ask it of every call they read, on every request. An
// ASCII name equals an ASCII one folded exactly when lowered.
func (e *Engine) ignored(tool string) bool {
	var buf [63]byte
	if e.ignoreLower == nil || len(tool) > len(buf) || !isASCII(tool) {
		return e.cfg.ignored(tool)
	}
	if e.toolIgnore {
		if o, ok := e.cfg.Tools[tool]; ok && o.Ignore {
			return true
		}
	}
	if e.ignoreLens&(1<<len(tool)) == 0 || tool != "" && !e.ignoreFirst[lowerASCII(tool[0])] {
		return false // no ignored name of its length and first letter
	}
	b := buf[:len(tool)]
	for i := range len(tool) {
		b[i] = lowerASCII(tool[i])
	}
	return e.ignoreLower[string(b)]
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		c += 'a' - 'A'
	}
	return c
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Parse is the package Parse with the engine's MetadataArgs left out of
// fingerprints.
func (e *Engine) Parse(body []byte) (*Trajectory, error) {
	meta := e.cfg.MetadataArgs
	if meta == nil {
		meta = defaultMetadataArgs
	}
	return parse(body, meta)
}

// ev is one tool call as the detectors see it.
type ev struct {
	step, call int
	c          *Call
	fp         uint64
	has        bool   // the call has a result
	res        uint64 // ResultFingerprint|1 once outcome computed it, else 0
	err        uint64 // ErrorSignature, 0 when not an error
	isErr      bool
	meaningful bool // error with a message, not only an exit status
	look       bool // an error line among the content a looking call (readOnly) shows
	neg        bool // empty or "not found" answer of a search
	ack        bool // short successful acknowledgement
}

// meaningfulError reports whether an error text says what failed. "exit 1"
// alone, or "exit 1: exit code 1" (the status line found again as the
// message), does not: a test run failing with fewer failures each time
// exits 1 every time.
func meaningfulError(text string) bool {
	if !strings.HasPrefix(text, "exit ") {
		return true
	}
	_, msg, ok := strings.Cut(text, ": ")
	if !ok || strings.TrimSpace(msg) == "" {
		return false
	}
	lower := strings.ToLower(msg)
	for _, status := range []string{"exit code", "exit status", "exited with", "returncode", "return code"} {
		if strings.HasPrefix(lower, status) {
			return false
		}
	}
	return true
}

// work is the per-Inspect scratch memory.
type work struct {
	evs  []ev
	toks []uint64
	// texts are the word sets of the last two texts compared (see
	// textSimilarity).
	texts [2]textSets
	// simToks holds the word hashes of simB (see similarity).
	simToks []uint64
	simB    string
	// lev is the latest call's levenshtein pattern (see similarity).
	lev  levPattern
	tmp  []byte
	tmp2 []byte
	cs   canonScratch
	// touched is touchCalls' result, kept so that its loads are made.
	touched uint64
	in      inspection
	lim     limits
}

// ErrDetector is wrapped by Verdict.Err when a detector panicked.
var ErrDetector = errors.New("inspect: detector failed")

// Inspect runs every detector over t and aggregates their findings. A nil
// or empty trajectory yields the zero Verdict. A detector that panics
// yields a verdict of no loop with Err set.
func (e *Engine) Inspect(t *Trajectory) (v Verdict) {
	if t == nil || len(t.Steps) == 0 {
		return Verdict{}
	}
	defer func() {
		// Fail open: a detector bug must not break the request, but it
		// must be seen. Only a runtime error's message is kept (an index, a
		// nil dereference); other panic values may quote the trajectory.
		if r := recover(); r != nil {
			v = Verdict{Err: fmt.Errorf("%w: %s", ErrDetector, panicText(r))}
		}
	}()
	w := e.pool.Get().(*work)
	w.simB, w.simToks = "", w.simToks[:0] // the hashes of "", and no other trajectory's string kept
	w.lev.set("")
	w.texts[0].forget()
	w.texts[1].forget()
	defer func() {
		w.simB = ""
		w.lev.set("")
		w.texts[0].forget()
		w.texts[1].forget()
		w.in = inspection{} // no trajectory kept in the pool
		e.pool.Put(w)
	}()
	// The inspection and its limits live in the pooled work: the
	// detectors make them escape, and each turn would allocate them.
	w.lim = e.cfg.resolve(t.Model)
	w.in = inspection{e: e, t: t, lim: &w.lim, w: w}
	in, lim := &w.in, &w.lim
	in.collect()
	var dets []Detection
	for _, d := range detectors {
		if !lim.enabled(d.cat) {
			continue
		}
		if det, ok := d.fn(in); ok && det.Score > 0 {
			det.Category = d.cat
			det.Score = clamp01(det.Score)
			dets = append(dets, det)
		}
	}
	return aggregate(dets, lim)
}

// panicText describes a recovered panic value without its content.
func panicText(r any) string {
	if re, ok := r.(runtime.Error); ok {
		return re.Error()
	}
	return fmt.Sprintf("panic of type %T", r)
}

type detector struct {
	cat Category
	fn  func(*inspection) (Detection, bool)
}

var detectors = []detector{
	{ToolRepetition, (*inspection).toolRepetition},
	{ToolCycle, (*inspection).toolCycle},
	{ParamDrift, (*inspection).paramDrift},
	{SameResult, (*inspection).sameResult},
	{ErrorCycle, (*inspection).errorCycle},
	{WhackAMole, (*inspection).whackAMole},
	{TestFixCycle, (*inspection).testFixCycle},
	{EditUndo, (*inspection).editUndo},
	{OutputRepetition, (*inspection).outputRepetition},
	{SummaryLoop, (*inspection).summaryLoop},
}

// inspection is one Inspect call's state.
type inspection struct {
	e   *Engine
	t   *Trajectory
	lim *limits
	w   *work
	// evs are the counted calls from Trajectory.Start on (at most
	// maxEvents of the latest); win is the index in evs where the window
	// of the last Window steps begins.
	evs []ev
	win int
}

// touchCalls reads each call's fingerprint in a loop
// short enough for the CPU to have many of the loads in flight at once:
// at a session's turn most of its older calls have left the CPU's caches,
// and collect, which does much more with each, would wait for them one or
// two at a time. It returns what it read, for the caller to keep, so that
// the loads are not left out.
func touchCalls(steps []Step) uint64 {
	var sum uint64
	for s := range steps {
		for k := range steps[s].Calls {
			sum += steps[s].Calls[k].Fingerprint
		}
	}
	return sum
}

// maxEvents bounds how far back the consecutive rules look: a run longer
// than this is long past every threshold anyway.
const maxEvents = 256

func (in *inspection) collect() {
	t, w := in.t, in.w
	evs := w.evs[:0]
	start := max(0, min(t.Start, len(t.Steps)))
	winStart := max(start, len(t.Steps)-in.lim.Window)
	from, skip := in.e.reach(t)
	in.win = -1
	recanon := !slices.Equal(t.meta, in.metadata())
	w.touched = touchCalls(t.Steps[from:])
	for s := from; s < len(t.Steps); s++ {
		if s >= winStart && in.win < 0 {
			in.win = len(evs)
		}
		st := &t.Steps[s]
		for k := range st.Calls {
			c := &st.Calls[k]
			if in.e.ignored(c.Name) {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			x := ev{step: s, call: k, c: c, fp: c.Fingerprint}
			if recanon {
				x.fp = in.refingerprint(c)
			}
			if c.HasResult {
				x.has = true
				x.isErr = c.IsError
				x.err = c.ErrorSignature()
				if !x.isErr && len(in.e.patterns) > 0 && in.matchesPattern(c.Result) {
					x.isErr = true
					x.err = hashString("pattern\x00"+c.Name) | 1
				}
				// An error with only an exit status says nothing about
				// what failed ("grep" finding nothing exits 1).
				x.meaningful = x.isErr && meaningfulError(c.ErrorText())
				// A call that only looks and shows content (a log tail with
				// an ERROR line in it) did not fail: what it shows may change.
				x.look = x.isErr && c.onlyLooks() && c.showsLines()
				x.neg = !x.isErr && c.negativeResult() && searchLike(c) || x.isErr && !x.meaningful && c.negativeResult()
				x.ack = !x.isErr && !x.neg && c.isAck()
			}
			evs = append(evs, x)
		}
	}
	if in.win < 0 {
		in.win = len(evs)
	}
	w.evs = evs
	in.evs = evs
}

// reach returns where the calls the detectors read begin: the step of the
// latest maxEvents counted calls from t.Start on, and how many counted
// calls of that step come before them. Only these calls count, found
// walking back, so that a long history costs no more than a short one;
// and as a history grows, its reach only moves on (the session cache
// drops the results before it, and finds the next turn's reach from it:
// sessionParse.reach). A trajectory of the session cache carries its
// reach, found when it was parsed.
func (e *Engine) reach(t *Trajectory) (from, skip int) {
	if r := t.reach; r.e == e && r.steps == len(t.Steps) && r.start == t.Start {
		return r.from, r.skip
	}
	from, skip, _ = e.walkReach(t)
	return from, skip
}

// walkReach is reach found walking back over the steps; counted is the
// number of counted calls from the step it returns on.
func (e *Engine) walkReach(t *Trajectory) (from, skip, counted int) {
	start := max(0, min(t.Start, len(t.Steps)))
	n := 0
	for s := len(t.Steps) - 1; s >= start; s-- {
		n += e.counted(&t.Steps[s])
		if n >= maxEvents {
			return s, n - maxEvents, n
		}
	}
	return start, 0, n
}

// counted is the number of st's calls the detectors read (not ignored).
func (e *Engine) counted(st *Step) int {
	n := 0
	for k := range st.Calls {
		if !e.ignored(st.Calls[k].Name) {
			n++
		}
	}
	return n
}

// reachMemo is an engine's reach over a trajectory of steps steps and
// that start.
type reachMemo struct {
	e                        *Engine
	steps, start, from, skip int
}

func (in *inspection) metadata() []string {
	if in.e.cfg.MetadataArgs == nil {
		return defaultMetadataArgs
	}
	return in.e.cfg.MetadataArgs
}

// refingerprint recomputes a call's fingerprint for an engine whose
// MetadataArgs differ from those the trajectory was parsed with.
func (in *inspection) refingerprint(c *Call) uint64 {
	if rawKind(c.Args) != '{' {
		return c.Fingerprint
	}
	in.w.tmp = in.w.cs.appendCanonical(in.w.tmp[:0], c.Args, 0, in.metadata())
	return uint64(newFNV().str(c.Name).byte(0).bytes(in.w.tmp))
}

func (in *inspection) matchesPattern(s string) bool {
	for _, re := range in.e.patterns {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// searchLike reports calls whose empty answer means "nothing found".
func searchLike(c *Call) bool {
	n := strings.ToLower(c.Name)
	for _, w := range [...]string{"search", "grep", "find", "glob", "query", "lookup", "list", "ls"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	f := c.Primary
	if i := strings.IndexByte(f, ' '); i >= 0 {
		f = f[:i]
	}
	switch f {
	case "grep", "rg", "ag", "ack", "find", "fd", "locate", "ls", "git grep":
		return true
	}
	return false
}

// sameOutcome reports whether two calls ended the same way: the same
// normalised result, or the same error signature.
func sameOutcome(a, b *ev) bool {
	if !a.has || !b.has {
		return false
	}
	if a == b || a.outcome() == b.outcome() { // a == b: no need to hash it
		return true
	}
	// The same error counts as the same outcome, unless the call only
	// looks: a log tail still showing an old error has news below it.
	return a.isErr && b.isErr && a.err == b.err && a.meaningful && !a.look
}

// outcome returns the call's result fingerprint (never 0), computing it on
// first use: only results that some rule compares are normalised.
func (x *ev) outcome() uint64 {
	if x.res == 0 {
		x.res = x.c.ResultFingerprint() | 1
	}
	return x.res
}

func clamp01(f float64) float64 {
	switch {
	case f < 0:
		return 0
	case f > 1:
		return 1
	}
	return f
}

// grow returns base + step*(n-thr), capped: scores grow with the count
// beyond the threshold.
func grow(base, step float64, n, thr int, capAt float64) float64 {
	return min(capAt, base+step*float64(n-thr))
}

// Scores. A rule at its trigger with no-progress evidence (the result did
// not change, the same error came back) scores above Single (0.9); with
// arguments alone it stays at warning level (<= 0.85).
const (
	strongBase = 0.92
	strongStep = 0.02
	warnBase   = 0.76
	warnStep   = 0.03
	warnCap    = 0.85
)

// evidence fills the call-derived fields of an Evidence from events.
func (in *inspection) evidence(idx []int) Evidence {
	var ev Evidence
	if len(idx) == 0 {
		return ev
	}
	ev.Calls = make([]CallRef, 0, len(idx))
	ev.Steps = make([]int, 0, len(idx))
	for _, i := range idx {
		x := &in.evs[i]
		st := &in.t.Steps[x.step]
		ev.Calls = append(ev.Calls, CallRef{Step: x.step, Message: st.Message, ToolCallID: x.c.ID, Name: x.c.Name, Args: x.c.Args})
		if n := len(ev.Steps); n == 0 || ev.Steps[n-1] != x.step {
			ev.Steps = append(ev.Steps, x.step)
		}
	}
	slices.Sort(ev.Steps)
	ev.Steps = slices.Compact(ev.Steps)
	ev.First, ev.Last = ev.Steps[0], ev.Steps[len(ev.Steps)-1]
	ev.Count = len(idx)
	last := in.evs[idx[len(idx)-1]].c
	ev.Tool = last.Name
	ev.Args = last.Args
	ev.Element = callElement(last)
	return ev
}

// withOutcome adds the unchanged result or error of call c to ev. A rule
// reports only the result of a call in evidenceZone, which the session
// cache keeps the evidence text of: a new use must be one it names.
func withOutcome(ev *Evidence, c *Call) {
	if c == nil || !c.HasResult {
		return
	}
	if c.IsError {
		ev.Error = c.ErrorText()
	}
	ev.Result = c.outcome()
}

// maxNormalizedText is how much of a text normalizedText reads.
const maxNormalizedText = 4096

func normalizedText(s string) string {
	if len(s) > maxNormalizedText {
		s = s[:maxNormalizedText]
	}
	return string(appendNormalized(nil, s))
}

// aggregate applies the rules of docs/design.md section 3: any score >
// Single, or two or more > Pair, or the weighted combination > Combined.
func aggregate(dets []Detection, lim *limits) Verdict {
	if len(dets) == 0 {
		return Verdict{}
	}
	slices.SortStableFunc(dets, func(a, b Detection) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	v := Verdict{Confidence: dets[0].Score}
	// Among the confident detections, the most specific names the loop:
	// the same failing test after each edit is a test_fix_cycle even when
	// error_cycle, counting the same error, scores a little higher.
	if dets[0].Score > lim.single {
		best := 0
		for i := 1; i < len(dets) && dets[i].Score > lim.single; i++ {
			if specificity(&dets[i]) < specificity(&dets[best]) {
				best = i
			}
		}
		d := dets[best]
		copy(dets[1:best+1], dets[:best])
		dets[0] = d
	}
	v.Detections, v.Category = dets, dets[0].Category
	pairs, combined := 0, 0.0
	for _, d := range dets {
		if d.Score > lim.Pair {
			pairs++
		}
		combined += lim.weight(d.Category) * d.Score
	}
	v.Loop = dets[0].Score > lim.single || pairs >= 2 || min(combined, 1) > lim.Combined
	v.PatternKey = patternKey(&dets[0])
	return v
}

// specificity ranks categories for naming a loop, most specific first:
// identical calls back to back say exactly what repeats; alternating
// errors, a file restored again and again, a failing test after edits and
// a drifting argument say more than "the same error again", which says
// more than "the same result" or the same call somewhere in the window.
// A search that keeps finding nothing is same_result, however it drifts.
func specificity(d *Detection) int {
	switch d.Category {
	case ToolRepetition:
		if ev := &d.Evidence; len(ev.Steps) > 0 && ev.Last-ev.First+1 == len(ev.Steps) {
			return 0 // back to back
		}
		return 8
	case WhackAMole:
		return 1
	case EditUndo:
		return 2 // going back to one state explains the failing runs between
	case TestFixCycle:
		return 3
	case ParamDrift:
		return 4
	case ToolCycle:
		return 5
	case ErrorCycle:
		return 6
	case SummaryLoop:
		if d.Evidence.Error != "" || d.Evidence.Element == "(empty reply)" {
			return 8 // failing turns say why the texts repeat
		}
	case SameResult:
		if negativeResult(d.Evidence.Result) {
			return 4 // nothing found, however the search was worded
		}
		return 7
	}
	return 9
}

// patternKey hashes what loops, not where: category, tool and the
// element's stable identity (canonical arguments, error text or text
// snippet), never call ids or step numbers.
func patternKey(d *Detection) string {
	h := newFNV().str(string(d.Category)).byte(0).str(d.Evidence.Tool).byte(0)
	switch d.Category {
	case ToolCycle:
		// The cycle's members in sorted order: the same cycle seen one call
		// later starts at another phase.
		args := make([]string, 0, len(d.Evidence.Calls))
		for _, c := range d.Evidence.Calls {
			args = append(args, c.Name+"\x00"+c.Args)
		}
		slices.Sort(args)
		args = slices.Compact(args)
		for _, a := range args {
			h = h.str(a).byte(0)
		}
	case ErrorCycle, WhackAMole, TestFixCycle:
		h = h.str(d.Evidence.Error)
		if d.Category == TestFixCycle {
			h = h.byte(0).str(d.Evidence.Args)
		}
	case OutputRepetition, SummaryLoop:
		h = h.str(d.Evidence.Element)
	case ParamDrift, EditUndo, SameResult:
		h = h.str(d.Evidence.Element)
	case SemanticLoop:
		// The judge names an approach, carried out with other arguments at
		// every turn: the tool alone.
	default:
		h = h.str(d.Evidence.Args)
	}
	return strconv.FormatUint(uint64(h), 16)
}

// shorten cuts s to at most n bytes on a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// callElement renders a call as `tool(primary or args)`, arguments cut to
// 40 bytes so that logs never carry long argument content.
func callElement(c *Call) string {
	a := c.Primary
	if a == "" {
		a = c.Args
		if a == "{}" {
			a = ""
		}
	}
	return c.Name + "(" + shorten(collapseSpace(a), 40) + ")"
}

func (d Detection) String() string {
	return fmt.Sprintf("%s %.2f %s x%d", d.Category, d.Score, d.Evidence.Element, d.Evidence.Count)
}

// isAck reports a short one-line success answer ("write complete", "ok",
// "File saved."): different calls answered this way are progress, and the
// same answer is no evidence that nothing changed.
func isAck(res string) bool {
	t := outputText(res)
	return len(t) <= 60 && !strings.Contains(t, "\n")
}
