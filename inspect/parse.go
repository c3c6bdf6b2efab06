package inspect

import (
	"errors"
	"fmt"
	"github.com/loopguard/loopguard/internal/rawjson"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// ErrMalformed reports a request body that is not a chat request loopguard can read.
var ErrMalformed = errors.New("inspect: malformed chat request")

// defaultMetadataArgs is what Parse leaves out of fingerprints; an Engine
// with other MetadataArgs parses with Engine.Parse.
var defaultMetadataArgs = []string{"task_progress"}

// Parse builds the trajectory of a chat-completions request body, leaving
// the default metadata arguments (task_progress) out of fingerprints. The
// body is validated once and walked in place, never unmarshalled. Every
// string of the Trajectory is a copy: the body may be reused once Parse
// returns. A body that is not a chat request yields an error wrapping
// ErrMalformed; Parse never panics.
func Parse(body []byte) (*Trajectory, error) { return parse(body, defaultMetadataArgs) }

// scratch is the parser's reusable working memory.
type scratch struct {
	cs   canonScratch
	tmp  []byte
	tmp2 []byte
	args []byte // unescaped argument text, canonicalised from here
	view []byte // a transient text (see parser.textView)
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{tmp: make([]byte, 0, 1024), tmp2: make([]byte, 0, 1024), args: make([]byte, 0, 1024), view: make([]byte, 0, 1024)}
}}

// maxPooledScratch keeps one huge request from pinning its scratch memory
// in the pool.
const maxPooledScratch = 1 << 20

type parser struct {
	*scratch
	ar    arena // the parser's own: a parse allocates its chunks, not it
	meta  []string
	t     *Trajectory
	calls []Call // current chunk calls are carved from
	// lastAssistant is true while the previous non-system message was an
	// assistant turn: a user message right after it may be tool output.
	lastAssistant bool
	// open is true while the last step still takes assistant-side items
	// (Responses).
	open bool
	// src is the whole body, for the offsets of Trajectory.Layout.
	src string
	// sess is the session cache's part in this parse, nil when uncached.
	sess *sessionParse
}

func parse(body []byte, meta []string) (*Trajectory, error) {
	return parseBody(body, meta, (*parser).chat, nil)
}

// parseBody is the frame every wire format is parsed in: validation, the
// pooled scratch memory, the arena and the recover that keeps a parser bug
// from taking the proxy down (it fails open). walk reads the body's
// top-level object (root) and fills p.t with the format-neutral builders
// (assistant, setArgs, findCall, setResult, user, text, rawStr).
//
// root is the caller's body, read in place: walk must keep nothing that
// views it. rawStr, text and setArgs copy what they keep into the arena;
// peek and textView are for looks that end before parseBody returns.
//
// sp, when not nil, lets walk resume from a session's cached state
// (parser.resume, which then sizes the arena) and records this parse's.
func parseBody(body []byte, meta []string, walk func(p *parser, root string) error, sp *sessionParse) (t *Trajectory, err error) {
	defer func() {
		// Parse must never take the proxy down: a bug here fails open.
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("%w: internal error: %v", ErrMalformed, r)
		}
	}()
	valid := false
	if sp != nil && sp.prev != nil {
		valid = sp.validSkipping(body)
	} else {
		valid = rawjson.Valid(body)
	}
	if !valid {
		return nil, fmt.Errorf("%w: invalid JSON", ErrMalformed)
	}
	s := scratchPool.Get().(*scratch)
	defer func() {
		if max(cap(s.tmp), cap(s.tmp2), cap(s.args), cap(s.view)) <= maxPooledScratch {
			scratchPool.Put(s)
		}
	}()
	// Only the strings the trajectory keeps are copied (or unescaped) into
	// the arena: not the body, then its strings again. It is sized for the
	// usual case, tool results making up most of the body.
	p := &parser{scratch: s, meta: meta, t: &Trajectory{}, sess: sp}
	if sp == nil {
		p.ar = newArena(len(body) + 1024)
	} // else sized by resume
	src := rawjson.View(body)
	i := rawjson.SkipSpace(src, 0)
	if i >= len(src) || src[i] != '{' {
		return nil, fmt.Errorf("%w: body is not a JSON object", ErrMalformed)
	}
	p.t.meta = meta
	p.src = src
	if sp == nil || sp.prev == nil {
		p.t.Steps = make([]Step, 0, 16) // a resumed parse takes the cached steps
	}
	if err := walk(p, src[i:]); err != nil {
		return nil, err
	}
	if p.sess != nil {
		p.sess.finish(p)
	}
	return p.t, nil
}

// historyAndModel returns the raw values of a body's history member (key:
// "messages", "input") and its "model", "" when absent; the last of
// duplicate keys wins, as in gjson.
func historyAndModel(root, key string) (history, model string) {
	eachMember(root, func(k, v string) bool {
		switch {
		case rawKeyIs(k, key):
			history = v
		case rawKeyIs(k, "model"):
			model = v
		}
		return true
	})
	return history, model
}

// chat walks a chat-completions body: {"model", "messages": [...]}.
func (p *parser) chat(root string) (err error) {
	msgs, model := p.history(root, "messages")
	if msgs == "" {
		return fmt.Errorf("%w: no messages", ErrMalformed)
	}
	if rawKind(msgs) != '[' {
		return fmt.Errorf("%w: messages is not an array", ErrMalformed)
	}
	at, idx, last := p.resume(msgs)
	p.t.Model = p.rawStr(model)
	// Messages are walked member by member in one pass (membersAt), not
	// bounded first and walked again: tool results make them large.
	for i := at; i < len(msgs) && msgs[i] != ']'; i = rawjson.SkipSpace(msgs, i) {
		if msgs[i] == ',' {
			i++
			continue
		}
		start := i
		if i, err = p.message(idx, msgs, i); err != nil {
			return err
		}
		p.note(msgs[start:i])
		last = [2]int{start, i}
		idx++
	}
	p.t.Messages = idx
	if idx > 0 {
		off := p.offset(msgs)
		p.t.Layout = Layout{Messages: [2]int{off, off + len(msgs)}, Last: [2]int{off + last[0], off + last[1]}}
	}
	return nil
}

// offset is the position in the body of v, a view of it.
func (p *parser) offset(v string) int {
	return int(uintptr(unsafe.Pointer(unsafe.StringData(v))) - uintptr(unsafe.Pointer(unsafe.StringData(p.src))))
}

// rawStr returns a raw JSON string's value as a string the Trajectory may
// keep: copied, or unescaped, into the arena; "" for any other kind.
func (p *parser) rawStr(v string) string { return p.ar.rawStr(v) }

// peek returns a raw JSON string's value for a comparison that ends before
// Parse returns: a view of the body, unless it has escapes (then it is
// unescaped into the arena, which is rare for roles, ids and types).
func (p *parser) peek(v string) string {
	if rawKind(v) != '"' || len(v) < 2 {
		return ""
	}
	if body := v[1 : len(v)-1]; strings.IndexByte(body, '\\') < 0 {
		return body
	}
	return p.ar.rawStr(v)
}

// message reads the message starting at s[at] and returns the index just
// past it.
func (p *parser) message(i int, s string, at int) (int, error) {
	if s[at] != '{' {
		return 0, fmt.Errorf("%w: message %d is not an object", ErrMalformed, i)
	}
	var role, content, toolCalls, fnCall, toolCallID, name, toolName string
	end := membersAt(s, at, func(k, v string) bool {
		switch {
		case rawKeyIs(k, "role"):
			role = v
		case rawKeyIs(k, "content"):
			content = v
		case rawKeyIs(k, "tool_calls"):
			toolCalls = v
		case rawKeyIs(k, "function_call"):
			fnCall = v
		case rawKeyIs(k, "tool_call_id"):
			toolCallID = v
		case rawKeyIs(k, "name"):
			name = v
		case rawKeyIs(k, "tool_name"):
			toolName = v // Ollama's: the result names its tool, not a call
		}
		return true
	})
	if rawKind(role) != '"' {
		return 0, fmt.Errorf("%w: message %d has no role", ErrMalformed, i)
	}
	switch p.peek(role) {
	case "assistant":
		p.assistant(i, content, toolCalls, fnCall)
		p.lastAssistant = true
	case "tool":
		p.toolResult(i, toolCallID, p.peek(toolName), content)
	case "function":
		p.toolResult(i, "", p.peek(name), content)
	case "user":
		p.user(i, content)
	default:
		// system, developer and unknown roles carry no step.
	}
	return end, nil
}

// text returns content as a string the Trajectory may keep: a plain
// string, or the text parts of an array joined by newlines.
func (p *parser) text(c string) string {
	switch rawKind(c) {
	case '"':
		return p.rawStr(c)
	case '[':
		n := 0
		p.eachTextPart(c, func(raw string) { n += len(raw) - 1 }) // unescaping only shortens
		p.ar.reserve(n)
		m := p.ar.mark()
		p.ar.buf = p.appendParts(p.ar.buf, c)
		return p.ar.since(m)
	}
	return ""
}

// textView is text for a look that ends before Parse returns (classifying
// a user message): a view of the body or of scratch memory, valid until
// the next textView.
func (p *parser) textView(c string) string {
	switch rawKind(c) {
	case '"':
		body := c[1 : len(c)-1]
		if strings.IndexByte(body, '\\') < 0 {
			return body
		}
		p.view = rawjson.AppendUnescaped(p.view[:0], body)
	case '[':
		p.view = p.appendParts(p.view[:0], c)
	default:
		return ""
	}
	return rawjson.View(p.view)
}

// appendParts appends the text parts of a content array, unescaped and
// joined by newlines.
func (p *parser) appendParts(dst []byte, c string) []byte {
	first := true
	p.eachTextPart(c, func(raw string) {
		if !first {
			dst = append(dst, '\n')
		}
		first = false
		dst = rawjson.AppendUnescaped(dst, raw[1:len(raw)-1])
	})
	return dst
}

// eachTextPart calls fn with the raw JSON string of every text part of a
// content array: plain strings and {"type":"text"|"input_text"|
// "output_text"|absent, "text": ...} objects.
func (p *parser) eachTextPart(c string, fn func(raw string)) {
	eachElement(c, func(part string) bool {
		txt := ""
		switch rawKind(part) {
		case '"':
			txt = part
		case '{':
			typ := ""
			eachMember(part, func(k, v string) bool {
				switch {
				case rawKeyIs(k, "type"):
					typ = p.peek(v)
				case rawKeyIs(k, "text"):
					txt = v
				}
				return true
			})
			if typ != "" && typ != "text" && typ != "input_text" && typ != "output_text" {
				txt = ""
			}
		}
		if rawKind(txt) == '"' && len(txt) >= 2 {
			fn(txt)
		}
		return true
	})
}

// newCalls returns n calls carved from a chunk of 64, or of n for a parse
// resuming a cached session: the one or two calls of a turn (which
// finish moves, see rehome).
func (p *parser) newCalls(n int) []Call {
	if cap(p.calls)-len(p.calls) < n {
		chunk := 64
		if p.sess != nil && p.sess.prev != nil {
			chunk = n
		}
		p.calls = make([]Call, 0, max(n, chunk))
	}
	start := len(p.calls)
	p.calls = p.calls[:start+n]
	return p.calls[start : start+n : start+n]
}

func (p *parser) assistant(i int, content, toolCalls, fnCall string) {
	st := Step{Message: i, Text: p.text(content)}
	n := 0
	if rawKind(toolCalls) == '[' {
		eachElement(toolCalls, func(tc string) bool {
			if rawKind(tc) == '{' {
				n++
			}
			return true
		})
	}
	if rawKind(fnCall) == '{' {
		n++
	}
	if n > 0 {
		st.Calls = p.newCalls(n)
		k := 0
		if rawKind(toolCalls) == '[' {
			eachElement(toolCalls, func(tc string) bool {
				if rawKind(tc) != '{' {
					return true
				}
				var id, fn string
				eachMember(tc, func(k, v string) bool {
					switch {
					case rawKeyIs(k, "id"):
						id = v
					case rawKeyIs(k, "function"):
						fn = v
					}
					return true
				})
				c := &st.Calls[k]
				k++
				c.ID = p.rawStr(id)
				p.function(c, fn)
				return true
			})
		}
		if rawKind(fnCall) == '{' {
			p.function(&st.Calls[k], fnCall)
		}
	}
	p.t.Steps = append(p.t.Steps, st)
}

// function fills a call from an OpenAI {"name","arguments"} object.
func (p *parser) function(c *Call, fn string) {
	c.ResultMessage = -1
	var name, args string
	eachMember(fn, func(k, v string) bool {
		switch {
		case rawKeyIs(k, "name"):
			name = v
		case rawKeyIs(k, "arguments"):
			args = v
		}
		return true
	})
	c.Name = p.rawStr(name)
	argText := args // Ollama and some clients send an object: use it as it is
	if rawKind(args) == '"' && len(args) >= 2 {
		p.args = rawjson.AppendUnescaped(p.args[:0], args[1:len(args)-1])
		argText = rawjson.View(p.args)
	}
	p.setArgs(c, argText)
}

// setArgs canonicalises the argument text and computes the fingerprints.
// argText may be a view of the body or of scratch memory: what the call
// keeps is copied into the arena.
func (p *parser) setArgs(c *Call, argText string) {
	trimmed := strings.TrimSpace(argText)
	k := rawKind(trimmed)
	if (k == '{' || k == '[') && rawjson.Valid(rawjson.Bytes(trimmed)) {
		p.ar.reserve(len(trimmed))
		m := p.ar.mark()
		p.ar.buf = p.cs.appendCanonical(p.ar.buf, trimmed, 0, p.meta)
		c.Args = p.ar.since(m)
		if key, v := primaryArg(trimmed); key != "" {
			c.Primary = p.primary(key, v)
			if key == "command" && rawKind(v) == '"' && c.Primary != "" && !strings.ContainsAny(c.Primary, " \t\n") {
				// str_replace_editor's command names an operation (view,
				// str_replace) on its path: the target is both.
				if pv := memberRaw(trimmed, "path"); rawKind(pv) == '"' {
					p.ar.reserve(len(c.Primary) + len(pv))
					m := p.ar.mark()
					p.ar.buf = append(append(p.ar.buf, c.Primary...), ' ')
					p.ar.buf = rawjson.AppendUnescaped(p.ar.buf, pv[1:len(pv)-1])
					c.Primary = p.ar.since(m)
				}
			}
		}
	} else {
		c.Args = p.ar.copy(trimmed)
	}
	c.storeFacts(argFactsOf(c))
	h := newFNV().str(c.Name).byte(0).str(c.Args)
	c.Fingerprint = uint64(h)
	if c.Primary != "" {
		c.PrimaryFingerprint = uint64(newFNV().str(c.Name).byte(0).str(c.Primary))
	}
}

func (p *parser) primary(key, v string) string {
	var s string
	if rawKind(v) == '[' {
		s = p.argv(v)
	} else {
		s = p.rawStr(v)
	}
	if isShellKey(key) {
		n := normalizeShell(s)
		if n != s {
			return p.ar.copy(n)
		}
		return s
	}
	return strings.TrimSpace(s)
}

// argv returns the command line of an argument vector: the script of
// ["bash","-lc","cmd"], else the words joined (["git","checkout","a.py"]).
func (p *parser) argv(v string) string {
	n, first, second, last := 0, "", "", ""
	eachElement(v, func(e string) bool {
		switch n {
		case 0:
			first = e
		case 1:
			second = e
		}
		n++
		last = e
		return true
	})
	sh := p.peek(first)
	if i := strings.LastIndexByte(sh, '/'); i >= 0 {
		sh = sh[i+1:]
	}
	flag := p.peek(second)
	if n == 1 || n == 3 && (sh == "bash" || sh == "sh" || sh == "zsh" || sh == "dash") && strings.HasPrefix(flag, "-") && strings.Contains(flag, "c") {
		return p.rawStr(last)
	}
	p.ar.reserve(len(v))
	m := p.ar.mark()
	eachElement(v, func(e string) bool {
		if rawKind(e) == '"' && len(e) >= 2 {
			if p.ar.mark() > m {
				p.ar.buf = append(p.ar.buf, ' ')
			}
			p.ar.buf = rawjson.AppendUnescaped(p.ar.buf, e[1:len(e)-1])
		}
		return true
	})
	return p.ar.since(m)
}

// toolResult pairs a tool (or legacy function) message with its call.
func (p *parser) toolResult(i int, id, fnName, content string) {
	p.lastAssistant = false
	c := p.findCall(id, fnName)
	if c == nil {
		return // orphan result: its call is not in the history
	}
	p.setResult(c, i, p.text(content))
}

func (p *parser) findCall(rawID, fnName string) *Call {
	steps := p.t.Steps
	lo := max(0, len(steps)-lookBack) // results follow their calls closely
	if rawKind(rawID) == '"' {
		id := p.peek(rawID)
		for s := len(steps) - 1; s >= lo; s-- {
			for k := range steps[s].Calls {
				c := &steps[s].Calls[k]
				if !c.HasResult && c.ID == id {
					return c
				}
			}
		}
		return nil
	}
	// Legacy role:"function": the earliest unanswered call of that name in
	// the latest step, else the earliest unanswered one.
	for s := len(steps) - 1; s >= lo; s-- {
		var any *Call
		for k := range steps[s].Calls {
			c := &steps[s].Calls[k]
			if c.HasResult {
				continue
			}
			if c.Name == fnName {
				return c
			}
			if any == nil {
				any = c
			}
		}
		if any != nil {
			return any
		}
	}
	return nil
}

func (p *parser) setResult(c *Call, msg int, res string) {
	c.HasResult = true
	c.Result = res
	c.ResultMessage = int32(msg)
	// The result fingerprint is computed lazily (Call.ResultFingerprint):
	// the detectors compare only recent and repeated results.
	ei := classifyError(resultText(res))
	if !ei.isError {
		return
	}
	c.IsError = true
	p.ar.reserve(len(ei.kind) + 2 + len(ei.line) + 16)
	m := p.ar.mark()
	// "kind: message", without repeating a kind the line starts with
	// ("ValueError: ValueError: x").
	// An edit that matches nothing quotes the text it looked for: the
	// same failure whatever that text was.
	if ei.kind == "edit no match" {
		ei.line = ""
	}
	if !hasPrefixFold(ei.line, ei.kind) {
		p.ar.buf = append(p.ar.buf, ei.kind...)
		if ei.line != "" {
			p.ar.buf = append(p.ar.buf, ": "...)
		}
	}
	if ei.line != "" {
		p.ar.buf, p.tmp2 = appendErrorSig(p.ar.buf, p.tmp2, ei.line)
	}
	if len(p.ar.buf)-m > 240 {
		p.ar.buf = p.ar.buf[:m+240]
	}
	c.setError(p.ar.since(m))
}

// user handles a user-role message: a genuine human message starts a new
// task; tool output sent in user role becomes the previous step's result;
// automated nudges change nothing.
func (p *parser) user(i int, content string) {
	afterAssistant := p.lastAssistant
	p.lastAssistant = false
	// Most user messages are only classified: copy the text only when it
	// becomes a result.
	switch classifyUser(p.textView(content)) {
	case userToolOutput:
		if afterAssistant && len(p.t.Steps) > 0 {
			p.attachUserResult(i, p.text(content))
		}
	case userAutomated:
		if churnNotice(p.textView(content)) {
			p.t.churn.add(len(p.t.Steps))
		}
	default:
		p.t.Start = len(p.t.Steps)
	}
}

// attachUserResult makes a user-role tool output the result of the last
// step: of its first unanswered call, or of the command in its text
// (agents like mini-swe-agent's text mode write ```bash blocks).
func (p *parser) attachUserResult(i int, txt string) {
	st := &p.t.Steps[len(p.t.Steps)-1]
	for k := range st.Calls {
		if !st.Calls[k].HasResult {
			p.setResult(&st.Calls[k], i, txt)
			return
		}
	}
	if len(st.Calls) > 0 {
		return
	}
	cmd := lastFencedBlock(st.Text)
	if cmd == "" {
		return
	}
	st.Calls = p.newCalls(1)
	c := &st.Calls[0]
	c.Name = "bash"
	p.tmp = append(append(p.tmp[:0], `{"command":`...), '"')
	p.tmp = rawjson.AppendEscaped(p.tmp, cmd)
	p.tmp = append(p.tmp, `"}`...)
	c.ResultMessage = -1
	p.setArgs(c, rawjson.View(p.tmp))
	p.setResult(c, i, txt)
}

// lastFencedBlock returns the body of the last ``` block in s, trimmed.
func lastFencedBlock(s string) string {
	end := strings.LastIndex(s, "```")
	if end < 0 {
		return ""
	}
	open := strings.LastIndex(s[:end], "```")
	if open < 0 {
		return ""
	}
	body := s[open+3 : end]
	if nl := strings.IndexByte(body, '\n'); nl >= 0 && !strings.ContainsAny(body[:nl], " \t") {
		body = body[nl+1:] // language tag
	}
	return strings.TrimSpace(body)
}

type userKind int

const (
	userGenuine userKind = iota
	userAutomated
	userToolOutput
)

// automatedPhrases are whole messages (lowercased, trimmed of punctuation)
// that harnesses send by themselves to keep an agent going.
var automatedPhrases = []string{
	"continue", "please continue", "go on", "proceed", "keep going", "carry on", "go ahead",
	"please proceed", "continue with the task", "please continue working on the task",
	"continue working", "next", "resume",
}

// automatedMarkers flag harness-written user messages anywhere in the
// first part of the text: condensation and summary notices, format-error
// re-asks, no-tool nudges and loopguard's own injected blocks.
var automatedMarkers = []string{
	"<loop-recovery", "[loopguard]", "loop_detected",
	"summary of the conversation", "summary of our conversation", "conversation summary",
	"conversation so far", "previous conversation", "earlier conversation", "context was condensed",
	"context condensed", "history was condensed", "has been summarized", "<summary>", "condensation",
	"conversation was compacted", "context was compacted", "this session is being continued",
	"tool call error", "format error", "you did not use a tool", "you haven't used", "no tool was used",
	"[error] you did not", "please always provide exactly one", "exactly one action", "one bash code block",
	"your response was not formatted", "please continue working", "if you have completed your assignment",
	"you must use a tool", "please use a tool", "continue on with the task",
	"trimming prompt", "context window limit", "prompt is too long", "maximum context length",
	// OpenHands: an error observation sent in user role, and its
	// condenser's placeholder summary.
	"[error occurred in processing last action]", "no events summarized", "contextwindowexceeded",
}

// toolOutputPrefixes mark tool output that an agent sends in user role.
var toolOutputPrefixes = []string{
	"<returncode>", "<output>", "observation:", "observation", "<tool_result", "<function_results",
	"tool output:", "command output:", "output:", "exit code:", "<tool_response", "[tool result",
	"execution output", "stdout:", "result:",
}

// churnMarkers flag a harness's notice that it cut the conversation to
// fit the model's context, or the context-length error that made it.
var churnMarkers = []string{
	"condensed", "condensation", "trimming prompt", "trimmed the conversation", "context window", "context length",
	"context_length", "maximum context", "prompt is too long", "conversation was compacted", "context was compacted",
	"has been summarized", "summary of the conversation", "conversation so far", "too many tokens",
	"contextwindowexceeded", "context_window_exceeded", "no events summarized",
}

// condenserHeads start the lines of the summaries OpenHands' condensers
// write in place of the events they forget (STATE:, TESTS:, CHANGES:, ...
// of the summarizing condenser; USER_CONTEXT:, COMPLETED:, PENDING:, ...
// of the structured one), sent back in user role.
var condenserHeads = []string{
	"STATE:", "TESTS:", "CHANGES:", "DEPS:", "INTENT:", "USER_CONTEXT:", "TASK_TRACKING:", "COMPLETED:", "PENDING:",
	"CURRENT_STATE:", "CODE_STATE:", "VERSION_CONTROL_STATUS:",
}

// condenserSummary reports a text laid out as a condenser's summary: three
// or more of its lines open with a heading of condenserHeads. A person
// writes such a layout rarely, and then not as a new task.
func condenserSummary(txt string) bool {
	if !strings.Contains(txt, "S:") && !strings.Contains(txt, "T:") && !strings.Contains(txt, "G:") {
		return false // none of the headings can be there: most messages stop here
	}
	n := 0
	for line := range strings.Lines(txt) {
		line = strings.TrimSpace(line)
		for _, h := range condenserHeads {
			if strings.HasPrefix(line, h) {
				n++
				break
			}
		}
		if n >= 3 {
			return true
		}
	}
	return false
}

// churnNotice reports a user-role message that says the context was cut
// (OpenHands' condensation observations, "Trimming prompt to meet context
// window limitations", a context-length error sent back).
func churnNotice(txt string) bool {
	head := txt[:min(len(txt), 600)]
	lower := strings.ToLower(head)
	for _, m := range churnMarkers {
		if strings.Contains(lower, m) {
			return true
		}
	}
	return condenserSummary(head)
}

func classifyUser(txt string) userKind {
	t := strings.TrimSpace(txt)
	if t == "" {
		return userAutomated
	}
	head := t
	if len(head) > 600 {
		head = head[:600]
	}
	lower := strings.ToLower(head)
	for _, pfx := range toolOutputPrefixes {
		if strings.HasPrefix(lower, pfx) {
			return userToolOutput
		}
	}
	// Cline / Roo XML-tool mode: "[read_file for 'a.go'] Result:".
	if strings.HasPrefix(t, "[") {
		if j := strings.Index(head, "] Result:"); j > 0 && j < 200 {
			return userToolOutput
		}
	}
	if strings.Contains(lower, "<returncode>") && strings.Contains(lower, "<output") {
		return userToolOutput
	}
	short := strings.Trim(lower, " .!\n\t")
	if slices.Contains(automatedPhrases, short) {
		return userAutomated
	}
	for _, m := range automatedMarkers {
		if strings.Contains(lower, m) {
			return userAutomated
		}
	}
	// loopguard writes its markers in lower case: no need to lower the
	// whole message, which can be a long tool output in user role.
	if strings.Contains(t, "<loop-recovery") || strings.Contains(t, "[loopguard]") {
		return userAutomated
	}
	if condenserSummary(head) {
		return userAutomated
	}
	return userGenuine
}
