package inspect

import (
	"fmt"

	"github.com/loopguard/loopguard/internal/wireapi"
)

func init() {
	adapters[wireapi.Gemini] = (*parser).gemini
	adapters[wireapi.CodeAssist] = (*parser).codeAssist
}

// gemini walks a Gemini generateContent body. "systemInstruction" is the
// system prompt and carries no step; the model is named by the path, not
// the body. Each "model" content is a step: its text parts are the text
// (thought parts included, which no rule tells apart), its functionCall
// parts the calls (args is an object, canonicalised as chat arguments
// are). A user content carrying functionResponse parts answers those
// calls, paired by id when both carry one, else by name in order; a
// response with an "error" member marks the result failed. A user content
// without them is judged as chat's user messages are.
func (p *parser) gemini(root string) error {
	contents, model := p.history(root, "contents")
	if rawKind(contents) != '[' {
		return fmt.Errorf("%w: no contents array", ErrMalformed)
	}
	at, idx, _ := p.resume(contents)
	if p.t.Model == "" {
		p.t.Model = p.rawStr(model)
	}
	return p.walkHistory(contents, at, idx, p.geminiContent)
}

// codeAssist walks a Code Assist body: Gemini's request under "request",
// the model beside it.
func (p *parser) codeAssist(root string) error {
	var req, model string
	eachMember(root, func(k, v string) bool {
		switch {
		case rawKeyIs(k, "request"):
			req = v
		case rawKeyIs(k, "model"):
			model = v
		}
		return true
	})
	if rawKind(req) != '{' {
		return fmt.Errorf("%w: no request object", ErrMalformed)
	}
	p.t.Model = p.rawStr(model)
	return p.gemini(req)
}

func (p *parser) geminiContent(i int, c string) error {
	if rawKind(c) != '{' {
		return fmt.Errorf("%w: content %d is not an object", ErrMalformed, i)
	}
	var role, parts string
	eachMember(c, func(k, v string) bool {
		switch {
		case rawKeyIs(k, "role"):
			role = v
		case rawKeyIs(k, "parts"):
			parts = v
		}
		return true
	})
	switch p.peek(role) {
	case "model":
		p.geminiModel(i, parts)
		p.lastAssistant = true
	case "user", "":
		// A content without a role is the user's (Gemini's default).
		if rawKind(parts) == '[' && p.geminiResults(i, parts) {
			p.lastAssistant = false
			return nil
		}
		p.user(i, parts)
	default:
		p.lastAssistant = false
	}
	return nil
}

// geminiModel adds the step of one model content.
func (p *parser) geminiModel(i int, parts string) {
	st := Step{Message: i, Text: p.text(parts)}
	n := 0
	eachElement(parts, func(part string) bool {
		if memberRaw(part, "functionCall") != "" {
			n++
		}
		return true
	})
	if n > 0 {
		st.Calls = p.newCalls(n)[:0]
	}
	eachElement(parts, func(part string) bool {
		fc := memberRaw(part, "functionCall")
		if rawKind(fc) != '{' {
			return true
		}
		var id, name, args string
		eachMember(fc, func(k, v string) bool {
			switch {
			case rawKeyIs(k, "id"):
				id = v
			case rawKeyIs(k, "name"):
				name = v
			case rawKeyIs(k, "args"):
				args = v
			}
			return true
		})
		if args == "" {
			args = "{}"
		}
		st.Calls = append(st.Calls, Call{ResultMessage: -1, ID: p.rawStr(id), Name: p.rawStr(name)})
		p.setArgs(&st.Calls[len(st.Calls)-1], args)
		return true
	})
	p.t.Steps = append(p.t.Steps, st)
}

// geminiResults pairs the functionResponse parts of a user content with
// their calls. It reports whether the content held any.
func (p *parser) geminiResults(i int, parts string) bool {
	found := false
	eachElement(parts, func(part string) bool {
		fr := memberRaw(part, "functionResponse")
		if rawKind(fr) != '{' {
			return true
		}
		found = true
		var id, name, resp string
		eachMember(fr, func(k, v string) bool {
			switch {
			case rawKeyIs(k, "id"):
				id = v
			case rawKeyIs(k, "name"):
				name = v
			case rawKeyIs(k, "response"):
				resp = v
			}
			return true
		})
		var c *Call
		if rawKind(id) == '"' {
			c = p.findCall(id, "")
		}
		if c == nil {
			c = p.findCall("", p.peek(name))
		}
		if c == nil {
			return true // orphan result: its call is not in the history
		}
		out, failed := geminiOutput(resp)
		res := p.text(out)
		if rawKind(out) == '{' {
			res = p.ar.copy(out)
		}
		p.setResult(c, i, res)
		if failed {
			p.markError(c)
		}
		return true
	})
	return found
}

// geminiOutput returns the raw text of a function response: its "output"
// or "error" string (Gemini CLI writes one of them), else the whole
// response object as JSON text; failed when it is the error.
func geminiOutput(resp string) (out string, failed bool) {
	if rawKind(resp) == '{' {
		if o := memberRaw(resp, "output"); rawKind(o) == '"' {
			return o, false
		}
		if e := memberRaw(resp, "error"); e != "" {
			if rawKind(e) == '"' {
				return e, true
			}
			return "", true
		}
	}
	return resp, false
}
