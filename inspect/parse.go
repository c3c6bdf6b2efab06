package inspect

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/tidwall/gjson"
)

// ErrMalformed reports a request body that is not a chat request loopguard can read.
var ErrMalformed = errors.New("inspect: malformed chat request")

// defaultMetadataArgs is what Parse leaves out of fingerprints; an Engine
// with other MetadataArgs parses with Engine.Parse.
var defaultMetadataArgs = []string{"task_progress"}

// Parse builds the trajectory of a chat-completions request body, leaving
// the default metadata arguments (task_progress) out of fingerprints. The
// body is validated once and read with gjson, never unmarshalled. Every
// string of the Trajectory is a copy: the body may be reused once Parse
// returns. A body that is not a chat request yields an error wrapping
// ErrMalformed; Parse never panics.
func Parse(body []byte) (*Trajectory, error) { return parse(body, defaultMetadataArgs) }

// scratch is the parser's reusable working memory.
type scratch struct {
	cs   canonScratch
	tmp  []byte
	tmp2 []byte
}

var scratchPool = sync.Pool{New: func() any { return &scratch{tmp: make([]byte, 0, 8192), tmp2: make([]byte, 0, 1024)} }}

type parser struct {
	*scratch
	ar    *arena
	meta  []string
	t     *Trajectory
	calls []Call // current chunk calls are carved from
	// lastAssistant is true while the previous non-system message was an
	// assistant turn: a user message right after it may be tool output.
	lastAssistant bool
}

func parse(body []byte, meta []string) (t *Trajectory, err error) {
	defer func() {
		// Parse must never take the proxy down: a bug here fails open.
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("%w: internal error: %v", ErrMalformed, r)
		}
	}()
	if !gjson.ValidBytes(body) {
		return nil, fmt.Errorf("%w: invalid JSON", ErrMalformed)
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	// One copy of the body backs every string of the trajectory.
	p := &parser{scratch: s, ar: newArena(len(body) + len(body)/4 + 1024), meta: meta, t: &Trajectory{}}
	src := p.ar.copy(unsafeString(body))
	i := skipSpace(src, 0)
	if i >= len(src) || src[i] != '{' {
		return nil, fmt.Errorf("%w: body is not a JSON object", ErrMalformed)
	}
	var msgs, model string
	eachMember(src[i:], func(k, v string) bool {
		switch {
		case rawKeyIs(k, "messages"):
			msgs = v
		case rawKeyIs(k, "model"):
			model = v
		}
		return true
	})
	if msgs == "" {
		return nil, fmt.Errorf("%w: no messages", ErrMalformed)
	}
	if rawKind(msgs) != '[' {
		return nil, fmt.Errorf("%w: messages is not an array", ErrMalformed)
	}
	p.t.meta = meta
	p.t.Model = p.rawStr(model)
	p.t.Steps = make([]Step, 0, 16)
	idx := 0
	eachElement(msgs, func(m string) bool {
		if err = p.message(idx, m); err != nil {
			return false
		}
		idx++
		return true
	})
	if err != nil {
		return nil, err
	}
	p.t.Messages = idx
	return p.t, nil
}

// rawStr returns a raw JSON string's value; a string without escapes is a
// view of the arena copy of the body, others are unescaped into the arena.
func (p *parser) rawStr(v string) string {
	if rawKind(v) != '"' || len(v) < 2 {
		return ""
	}
	body := v[1 : len(v)-1]
	if strings.IndexByte(body, '\\') < 0 {
		return body // already in the arena
	}
	return p.ar.rawStr(v)
}

func (p *parser) message(i int, m string) error {
	if rawKind(m) != '{' {
		return fmt.Errorf("%w: message %d is not an object", ErrMalformed, i)
	}
	var role, content, toolCalls, fnCall, reasoning, toolCallID, name string
	eachMember(m, func(k, v string) bool {
		switch {
		case rawKeyIs(k, "role"):
			role = v
		case rawKeyIs(k, "content"):
			content = v
		case rawKeyIs(k, "tool_calls"):
			toolCalls = v
		case rawKeyIs(k, "function_call"):
			fnCall = v
		case rawKeyIs(k, "reasoning_content"), rawKeyIs(k, "reasoning"):
			if rawKind(v) == '"' {
				reasoning = v
			}
		case rawKeyIs(k, "tool_call_id"):
			toolCallID = v
		case rawKeyIs(k, "name"):
			name = v
		}
		return true
	})
	if rawKind(role) != '"' {
		return fmt.Errorf("%w: message %d has no role", ErrMalformed, i)
	}
	switch p.rawStr(role) {
	case "assistant":
		p.assistant(i, content, reasoning, toolCalls, fnCall)
		p.lastAssistant = true
	case "tool":
		p.toolResult(i, toolCallID, "", content)
	case "function":
		p.toolResult(i, "", p.rawStr(name), content)
	case "user":
		p.user(i, content)
	default:
		// system, developer and unknown roles carry no step.
	}
	return nil
}

// text returns content as a string: a plain string, or the text parts of
// an array joined by newlines.
func (p *parser) text(c string) string {
	switch rawKind(c) {
	case '"':
		return p.rawStr(c)
	case '[':
		var parts []string
		n := 0
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
						typ = p.rawStr(v)
					case rawKeyIs(k, "text"):
						txt = v
					}
					return true
				})
				if typ != "" && typ != "text" && typ != "input_text" && typ != "output_text" {
					txt = ""
				}
			}
			if rawKind(txt) == '"' {
				parts = append(parts, p.rawStr(txt))
				n += len(parts[len(parts)-1]) + 1
			}
			return true
		})
		if len(parts) == 1 {
			return parts[0]
		}
		p.ar.reserve(n)
		m := p.ar.mark()
		for i, s := range parts {
			if i > 0 {
				p.ar.buf = append(p.ar.buf, '\n')
			}
			p.ar.buf = append(p.ar.buf, s...)
		}
		return p.ar.since(m)
	}
	return ""
}

func (p *parser) newCalls(n int) []Call {
	if cap(p.calls)-len(p.calls) < n {
		p.calls = make([]Call, 0, max(n, 64))
	}
	start := len(p.calls)
	p.calls = p.calls[:start+n]
	return p.calls[start : start+n : start+n]
}

func (p *parser) assistant(i int, content, reasoning, toolCalls, fnCall string) {
	st := Step{Message: i, Text: p.text(content), Reasoning: p.rawStr(reasoning)}
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
	argText := args
	if rawKind(args) == '"' {
		argText = p.rawStr(args)
	} // else Ollama and some clients send an object: use it as it is
	p.setArgs(c, argText)
}

// setArgs canonicalises the argument text and computes the fingerprints.
func (p *parser) setArgs(c *Call, argText string) {
	trimmed := strings.TrimSpace(argText)
	k := rawKind(trimmed)
	if (k == '{' || k == '[') && gjson.Valid(trimmed) {
		p.ar.reserve(len(trimmed))
		m := p.ar.mark()
		p.ar.buf = p.cs.appendCanonical(p.ar.buf, trimmed, 0, p.meta)
		c.Args = p.ar.since(m)
		if key, v := primaryArg(trimmed); key != "" {
			c.Primary = p.primary(key, v)
		}
	} else {
		c.Args = trimmed // a view of the arena: no copy needed
	}
	h := newFNV().str(c.Name).byte(0).str(c.Args)
	c.Fingerprint = uint64(h)
	if c.Primary != "" {
		c.PrimaryFingerprint = uint64(newFNV().str(c.Name).byte(0).str(c.Primary))
	}
}

func (p *parser) primary(key, v string) string {
	var s string
	if rawKind(v) == '[' {
		// ["bash","-lc","cmd"]: the command is the last element.
		last := ""
		eachElement(v, func(e string) bool { last = e; return true })
		s = p.rawStr(last)
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
	lo := max(0, len(steps)-64) // results follow their calls closely
	if rawKind(rawID) == '"' {
		id := p.rawStr(rawID)
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
	c.ResultMessage = msg
	// The result fingerprint is computed lazily (Call.ResultFingerprint):
	// the detectors compare only recent and repeated results.
	ei := classifyError(res)
	if !ei.isError {
		return
	}
	c.IsError = true
	p.ar.reserve(len(ei.kind) + 2 + len(ei.line) + 16)
	m := p.ar.mark()
	// "kind: message", without repeating a kind the line starts with
	// ("ValueError: ValueError: x").
	if !hasPrefixFold(ei.line, ei.kind) {
		p.ar.buf = append(p.ar.buf, ei.kind...)
		p.ar.buf = append(p.ar.buf, ": "...)
	}
	if ei.line != "" {
		p.ar.buf, p.tmp2 = appendErrorSig(p.ar.buf, p.tmp2, ei.line)
	}
	if len(p.ar.buf)-m > 240 {
		p.ar.buf = p.ar.buf[:m+240]
	}
	c.ErrorText = p.ar.since(m)
	c.ErrorSignature = hashString(c.ErrorText) | 1 // never 0: 0 means "no error"
}

// user handles a user-role message: a genuine human message starts a new
// task; tool output sent in user role becomes the previous step's result;
// automated nudges change nothing.
func (p *parser) user(i int, content string) {
	txt := p.text(content)
	afterAssistant := p.lastAssistant
	p.lastAssistant = false
	switch classifyUser(txt) {
	case userToolOutput:
		if afterAssistant && len(p.t.Steps) > 0 {
			p.attachUserResult(i, txt)
		}
	case userAutomated:
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
	p.tmp = appendJSONEscaped(p.tmp, cmd)
	p.tmp = append(p.tmp, `"}`...)
	c.ResultMessage = -1
	p.setArgs(c, p.ar.copy(unsafeString(p.tmp)))
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

func appendJSONEscaped(dst []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return dst
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
}

// toolOutputPrefixes mark tool output that an agent sends in user role.
var toolOutputPrefixes = []string{
	"<returncode>", "<output>", "observation:", "observation", "<tool_result", "<function_results",
	"tool output:", "command output:", "output:", "exit code:", "<tool_response", "[tool result",
	"execution output", "stdout:", "result:",
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
	if strings.Contains(strings.ToLower(t), "<loop-recovery") || strings.Contains(t, "[loopguard]") {
		return userAutomated
	}
	return userGenuine
}

// unsafeString views b as a string without copying; the caller copies it
// before b changes.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
