package inspect

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

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
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, fmt.Errorf("%w: body is not a JSON object", ErrMalformed)
	}
	var msgs, model gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "messages":
			msgs = v
		case "model":
			model = v
		}
		return true
	})
	if !msgs.Exists() {
		return nil, fmt.Errorf("%w: no messages", ErrMalformed)
	}
	if !msgs.IsArray() {
		return nil, fmt.Errorf("%w: messages is not an array", ErrMalformed)
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	p := &parser{scratch: s, ar: newArena(len(body) + len(body)/4), meta: meta, t: &Trajectory{}}
	p.t.meta = meta
	if model.Type == gjson.String {
		p.t.Model = p.ar.str(model)
	}
	p.t.Steps = make([]Step, 0, 16)
	idx := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
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

func (p *parser) message(i int, m gjson.Result) error {
	if !m.IsObject() {
		return fmt.Errorf("%w: message %d is not an object", ErrMalformed, i)
	}
	var role, content, toolCalls, fnCall, reasoning, toolCallID, name gjson.Result
	m.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "role":
			role = v
		case "content":
			content = v
		case "tool_calls":
			toolCalls = v
		case "function_call":
			fnCall = v
		case "reasoning_content", "reasoning":
			if v.Type == gjson.String {
				reasoning = v
			}
		case "tool_call_id":
			toolCallID = v
		case "name":
			name = v
		}
		return true
	})
	if role.Type != gjson.String {
		return fmt.Errorf("%w: message %d has no role", ErrMalformed, i)
	}
	switch role.Str {
	case "assistant":
		p.assistant(i, content, reasoning, toolCalls, fnCall)
		p.lastAssistant = true
	case "tool":
		p.toolResult(i, toolCallID, "", content)
	case "function":
		p.toolResult(i, gjson.Result{}, name.Str, content)
	case "user":
		p.user(i, content)
	default:
		// system, developer and unknown roles carry no step.
	}
	return nil
}

// text returns content as a string: a plain string, or the text parts of
// an array joined by newlines.
func (p *parser) text(c gjson.Result) string {
	switch {
	case c.Type == gjson.String:
		return p.ar.str(c)
	case c.IsArray():
		p.ar.reserve(len(c.Raw))
		m := p.ar.mark()
		first := true
		c.ForEach(func(_, part gjson.Result) bool {
			var txt gjson.Result
			if part.Type == gjson.String {
				txt = part
			} else if part.IsObject() {
				typ := part.Get("type").Str
				if typ != "" && typ != "text" && typ != "input_text" && typ != "output_text" {
					return true
				}
				txt = part.Get("text")
			}
			if txt.Type != gjson.String {
				return true
			}
			if !first {
				p.ar.buf = append(p.ar.buf, '\n')
			}
			first = false
			raw := txt.Raw
			if len(raw) >= 2 {
				p.ar.buf = appendUnescaped(p.ar.buf, raw[1:len(raw)-1])
			}
			return true
		})
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

func (p *parser) assistant(i int, content, reasoning, toolCalls, fnCall gjson.Result) {
	st := Step{Message: i, Text: p.text(content)}
	if reasoning.Exists() {
		st.Reasoning = p.ar.str(reasoning)
	}
	n := 0
	if toolCalls.IsArray() {
		toolCalls.ForEach(func(_, tc gjson.Result) bool {
			if tc.IsObject() {
				n++
			}
			return true
		})
	}
	if fnCall.IsObject() {
		n++
	}
	if n > 0 {
		st.Calls = p.newCalls(n)
		k := 0
		if toolCalls.IsArray() {
			toolCalls.ForEach(func(_, tc gjson.Result) bool {
				if !tc.IsObject() {
					return true
				}
				var id, fn gjson.Result
				tc.ForEach(func(k, v gjson.Result) bool {
					switch k.Str {
					case "id":
						id = v
					case "function":
						fn = v
					}
					return true
				})
				c := &st.Calls[k]
				k++
				c.ID = p.ar.str(id)
				p.function(c, fn)
				return true
			})
		}
		if fnCall.IsObject() {
			p.function(&st.Calls[k], fnCall)
		}
	}
	p.t.Steps = append(p.t.Steps, st)
}

// function fills a call from an OpenAI {"name","arguments"} object.
func (p *parser) function(c *Call, fn gjson.Result) {
	c.ResultMessage = -1
	var name, args gjson.Result
	if fn.IsObject() {
		fn.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "name":
				name = v
			case "arguments":
				args = v
			}
			return true
		})
	}
	c.Name = p.ar.str(name)
	var argText string
	switch {
	case args.Type == gjson.String:
		argText = p.ar.str(args) // Ollama and some clients send an object instead
	case args.Exists():
		argText = args.Raw
	}
	p.setArgs(c, argText)
}

// setArgs canonicalises the argument text and computes the fingerprints.
func (p *parser) setArgs(c *Call, argText string) {
	trimmed := strings.TrimSpace(argText)
	var parsed gjson.Result
	if trimmed != "" && gjson.Valid(trimmed) {
		parsed = gjson.Parse(trimmed)
	}
	if parsed.IsObject() || parsed.IsArray() {
		p.ar.reserve(len(trimmed))
		m := p.ar.mark()
		p.ar.buf = p.cs.appendCanonical(p.ar.buf, parsed, 0, p.meta)
		c.Args = p.ar.since(m)
		if k, v := primaryArg(parsed); k != "" {
			c.Primary = p.primary(k, v, c.Name)
		}
	} else {
		c.Args = p.ar.copy(trimmed)
	}
	h := newFNV().str(c.Name).byte(0).str(c.Args)
	c.Fingerprint = uint64(h)
	if c.Primary != "" {
		c.PrimaryFingerprint = uint64(newFNV().str(c.Name).byte(0).str(c.Primary))
	}
}

func (p *parser) primary(key string, v gjson.Result, tool string) string {
	var s string
	if v.IsArray() {
		// ["bash","-lc","cmd"]: the command is the last element.
		arr := v.Array()
		if len(arr) == 0 {
			return ""
		}
		last := arr[len(arr)-1]
		if last.Type != gjson.String {
			return ""
		}
		s = p.ar.str(last)
	} else {
		s = p.ar.str(v)
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
func (p *parser) toolResult(i int, id gjson.Result, fnName string, content gjson.Result) {
	p.lastAssistant = false
	c := p.findCall(id, fnName)
	if c == nil {
		return // orphan result: its call is not in the history
	}
	p.setResult(c, i, p.text(content))
}

func (p *parser) findCall(id gjson.Result, fnName string) *Call {
	steps := p.t.Steps
	lo := max(0, len(steps)-64) // results follow their calls closely
	if id.Type == gjson.String {
		for s := len(steps) - 1; s >= lo; s-- {
			for k := range steps[s].Calls {
				c := &steps[s].Calls[k]
				if !c.HasResult && c.ID == id.Str {
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
	p.tmp = appendNormalized(p.tmp[:0], res)
	c.ResultFingerprint = uint64(newFNV().bytes(p.tmp))
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
func (p *parser) user(i int, content gjson.Result) {
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
	p.setArgs(c, p.ar.copy(string(p.tmp)))
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
