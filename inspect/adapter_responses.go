package inspect

import (
	"fmt"
	"strings"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// API names the wire format of a request body: one of the registry's
// (internal/wireapi). Every API has an adapter that builds the same
// Trajectory from its body, so the detectors never see the difference;
// each adapter file registers itself in adapters.
type API = wireapi.Name

// adapter walks the validated body of one API into p.t (see parseBody:
// root is the caller's body, read in place, so nothing viewing it is kept).
type adapter func(p *parser, root string) error

// adapters maps each API to its walker, filled by each adapter file's
// init. Chat completions has its own entry point (Parse); an API without a
// walker is read as chat.
var adapters = map[API]adapter{}

func init() { adapters[wireapi.Responses] = (*parser).responses }

// ParseAPI builds the trajectory of a request body in the given API, with
// the default metadata arguments left out of fingerprints. An empty or
// unknown api is taken as ChatCompletions. Strings in the result are copies;
// errors wrap ErrMalformed; ParseAPI never panics.
func ParseAPI(api API, body []byte) (*Trajectory, error) {
	return parseAPI(api, body, defaultMetadataArgs)
}

// ParseAPI is the package ParseAPI with the engine's MetadataArgs left out
// of fingerprints.
func (e *Engine) ParseAPI(api API, body []byte) (*Trajectory, error) {
	meta := e.cfg.MetadataArgs
	if meta == nil {
		meta = defaultMetadataArgs
	}
	return parseAPI(api, body, meta)
}

func parseAPI(api API, body []byte, meta []string) (*Trajectory, error) {
	walk, ok := adapters[api]
	if !ok {
		return parse(body, meta)
	}
	return parseBody(body, meta, walk, nil)
}

// DetectAPI tells which API a request is in: by its path when an API of
// the registry answers it (internal/wireapi), else by the body's shape,
// for records replayed without a path. It never fails: a body it cannot
// place is chat.
func DetectAPI(path string, body []byte) API {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if r := wireapi.Match(strings.TrimRight(path, "/")); r.API != nil {
		return r.API.Name
	}
	return detectShape(body)
}

// detectShape places a body by the registry's members: the first API whose
// history member it has and one of whose marks (members only that API
// has) it carries; else, for a "messages" history, by its messages; else
// the first API whose history it has, or whose marks it carries. A plain
// text conversation reads the same in chat and Anthropic form, so the tie
// goes to chat.
func detectShape(body []byte) API {
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return wireapi.Chat
	}
	var withHistory, marked *wireapi.API
	for i := range wireapi.APIs {
		a := &wireapi.APIs[i]
		holder := a.History
		if a.Wrap != "" {
			holder = a.Wrap
		}
		has := root.Get(holder).Exists()
		mark := false
		for _, m := range a.Marks {
			if root.Get(m).Exists() {
				mark = true
				break
			}
		}
		switch {
		case has && mark:
			return a.Name
		case has && withHistory == nil:
			withHistory = a
		case mark && marked == nil:
			marked = a
		}
	}
	msgs := root.Get("messages")
	switch {
	case msgs.Exists():
		return messagesShape(msgs)
	case withHistory != nil:
		return withHistory.Name
	case marked != nil:
		return marked.Name
	}
	return wireapi.Chat
}

// messagesShape places a "messages" history that no member placed: a tool
// result named by tool_name alone is Ollama's, content blocks of tool use
// or thinking are Anthropic's.
func messagesShape(msgs gjson.Result) API {
	api := wireapi.Chat
	msgs.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").String() == "tool" && m.Get("tool_name").Exists() && !m.Get("tool_call_id").Exists() {
			api = wireapi.Ollama
			return false
		}
		switch m.Get("role").String() {
		case "system", "developer", "tool", "function":
			api = wireapi.Chat
			return false
		}
		if m.Get("tool_calls").Exists() || m.Get("tool_call_id").Exists() {
			api = wireapi.Chat
			return false
		}
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			switch b.Get("type").String() {
			case "tool_use", "tool_result", "thinking", "redacted_thinking":
				api = wireapi.Anthropic
				return false
			}
			return true
		})
		return api == wireapi.Chat
	})
	return api
}

// responses walks a Responses API body: "input" is a string (one user
// message) or a list of items. Assistant-side items in a row (reasoning, an
// assistant message, function calls) form one step, as one assistant
// message with tool_calls does in chat; function_call_output items are paired
// to their calls by call_id. "instructions" is the system prompt and carries
// no step. A request that continues a stored response (previous_response_id,
// conversation) shows only its new items: the steps before live on the
// server.
func (p *parser) responses(root string) error {
	input, model := p.history(root, "input")
	switch rawKind(input) {
	case '"':
		// One user message: a new task, nothing to judge yet.
		p.sess = nil // nothing to resume from next time
		p.ar = newArena(len(model) + 1024)
		p.t.Model = p.rawStr(model)
		p.t.Messages = 1
		return nil
	case '[':
	case 0, 'n':
		return fmt.Errorf("%w: no input", ErrMalformed)
	default:
		return fmt.Errorf("%w: input is neither a string nor an array", ErrMalformed)
	}
	at, base, _ := p.resume(input)
	p.t.Model = p.rawStr(model)
	items := make([]string, 0, 64)
	p.walkHistory(input, at, base, func(_ int, it string) error {
		items = append(items, it)
		return nil
	})
	for j, it := range items {
		i := base + j
		if rawKind(it) != '{' {
			return fmt.Errorf("%w: input item %d is not an object", ErrMalformed, i)
		}
		f := responseFields(it)
		typ := p.peek(f.typ)
		if typ == "" && f.role != "" {
			typ = "message" // EasyInputMessage: {"role","content"}
		}
		switch typ {
		case "message":
			role := p.peek(f.role)
			if role != "assistant" {
				p.open = false
				if role == "user" {
					p.user(i, f.content)
				} else {
					p.lastAssistant = false // system, developer
				}
				continue
			}
			st := p.openStep(i, false)
			txt := p.text(f.content)
			if st.Text == "" {
				st.Text = txt
			} else if txt != "" {
				st.Text = p.join(st.Text, txt)
			}
		case "reasoning":
			// A reasoning item opens the turn it thinks for; no rule
			// reads its text.
			p.openStep(i, false)
		case "function_call", "custom_tool_call", "local_shell_call":
			st := p.openStep(i, true)
			if st.Calls == nil {
				st.Calls = p.newCalls(countCalls(items[j:]))[:0]
			}
			// Within the carved capacity append does not allocate; a turn
			// that interleaves more calls than counted grows as usual.
			st.Calls = append(st.Calls, Call{ResultMessage: -1, ID: p.rawStr(f.callID)})
			c := &st.Calls[len(st.Calls)-1]
			switch typ {
			case "function_call":
				c.Name = p.rawStr(f.name)
				args := f.args
				if rawKind(args) == '"' {
					args = p.rawStr(args)
				}
				p.setArgs(c, args)
			case "custom_tool_call":
				// Free-form input (Codex's apply_patch grammar tool).
				c.Name = p.rawStr(f.name)
				p.setArgs(c, p.rawStr(f.input))
			default:
				// {"action":{"type":"exec","command":["bash","-lc",...]}}:
				// the command is the primary argument.
				c.Name = "local_shell"
				p.setArgs(c, f.action)
			}
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
			p.open = false
			p.lastAssistant = false
			id := f.callID
			if id == "" {
				id = f.id // local_shell_call_output names its call by "id"
			}
			if rawKind(id) != '"' {
				continue // no call id: nothing to pair it with
			}
			if c := p.findCall(id, ""); c != nil {
				p.setResult(c, i, p.outputText(f.output))
			}
		default:
			// item_reference and server-side tool calls (web_search_call,
			// file_search_call, ...) are not the agent's steps.
			p.open = false
			p.lastAssistant = false
		}
	}
	return nil
}

// responseItem holds the raw members of one input item that the walk reads.
type responseItem struct {
	typ, role, content            string
	id, callID, name, args, input string
	action, output                string
}

func responseFields(it string) responseItem {
	var f responseItem
	eachMember(it, func(k, v string) bool {
		switch {
		case rawKeyIs(k, "type"):
			f.typ = v
		case rawKeyIs(k, "role"):
			f.role = v
		case rawKeyIs(k, "content"):
			f.content = v
		case rawKeyIs(k, "id"):
			f.id = v
		case rawKeyIs(k, "call_id"):
			f.callID = v
		case rawKeyIs(k, "name"):
			f.name = v
		case rawKeyIs(k, "arguments"):
			f.args = v
		case rawKeyIs(k, "input"):
			f.input = v
		case rawKeyIs(k, "action"):
			f.action = v
		case rawKeyIs(k, "output"):
			f.output = v
		}
		return true
	})
	return f
}

// openStep returns the step that takes item i: the open one, or a new one.
// Within one response the output runs reasoning, message, calls; so a
// message or reasoning item after text or calls starts the next turn, while
// a call (call is true) always joins the open step.
func (p *parser) openStep(i int, call bool) *Step {
	if p.open {
		st := &p.t.Steps[len(p.t.Steps)-1]
		if call || (st.Text == "" && len(st.Calls) == 0) {
			return st
		}
	}
	p.open = true
	p.lastAssistant = true
	p.t.Steps = append(p.t.Steps, Step{Message: i})
	return &p.t.Steps[len(p.t.Steps)-1]
}

// countCalls counts the call items at the head of items, so that a step's
// calls are carved from the arena at once.
func countCalls(items []string) int {
	n := 0
	for _, it := range items {
		typ := ""
		eachMember(it, func(k, v string) bool {
			if rawKeyIs(k, "type") {
				typ = v
				return false
			}
			return true
		})
		switch typ {
		case `"function_call"`, `"custom_tool_call"`, `"local_shell_call"`:
			n++
		case `"reasoning"`:
			// Interleaved reasoning stays in the turn.
		default:
			return max(n, 1)
		}
	}
	return max(n, 1)
}

// outputText is a function_call_output's output: a string, or (newer API)
// an array of input_text / input_image parts.
func (p *parser) outputText(out string) string {
	if rawKind(out) == '[' || rawKind(out) == '"' {
		return p.text(out)
	}
	return ""
}

// join returns a + "\n" + b in the arena.
func (p *parser) join(a, b string) string {
	p.ar.reserve(len(a) + 1 + len(b))
	m := p.ar.mark()
	p.ar.buf = append(p.ar.buf, a...)
	p.ar.buf = append(p.ar.buf, '\n')
	p.ar.buf = append(p.ar.buf, b...)
	return p.ar.since(m)
}
