package inspect

import (
	"fmt"

	"github.com/loopguard/loopguard/internal/wireapi"
)

func init() { adapters[wireapi.Anthropic] = (*parser).anthropic }

// anthropic walks an Anthropic Messages body. "system" is the system prompt
// and carries no step. Each assistant message is a step: its text blocks
// are the text (its thinking blocks no rule reads), its tool_use blocks the
// calls (input is an object, canonicalised as chat arguments are). A user
// message carrying tool_result blocks answers those calls, paired by
// tool_use_id; is_error marks a result failed even when its text does not
// say so. Text blocks beside tool results (Claude Code's <system-reminder>s,
// loopguard's own notices) are not a new human message; a user message
// without tool results is judged as chat's user messages are.
func (p *parser) anthropic(root string) error {
	msgs, model := p.history(root, "messages")
	if rawKind(msgs) != '[' {
		return fmt.Errorf("%w: no messages array", ErrMalformed)
	}
	at, idx, _ := p.resume(msgs)
	p.t.Model = p.rawStr(model)
	return p.walkHistory(msgs, at, idx, p.anthropicMessage)
}

func (p *parser) anthropicMessage(i int, m string) error {
	if rawKind(m) != '{' {
		return fmt.Errorf("%w: message %d is not an object", ErrMalformed, i)
	}
	var role, content string
	eachMember(m, func(k, v string) bool {
		switch {
		case rawKeyIs(k, "role"):
			role = v
		case rawKeyIs(k, "content"):
			content = v
		}
		return true
	})
	if rawKind(role) != '"' {
		return fmt.Errorf("%w: message %d has no role", ErrMalformed, i)
	}
	switch p.peek(role) {
	case "assistant":
		p.anthropicAssistant(i, content)
		p.lastAssistant = true
	case "user":
		if rawKind(content) == '[' && p.anthropicResults(i, content) {
			p.lastAssistant = false
			return nil
		}
		p.user(i, content)
	default:
		p.lastAssistant = false
	}
	return nil
}

// anthropicAssistant adds the step of one assistant message.
func (p *parser) anthropicAssistant(i int, content string) {
	st := Step{Message: i}
	if rawKind(content) != '[' {
		st.Text = p.text(content)
		p.t.Steps = append(p.t.Steps, st)
		return
	}
	st.Text = p.text(content) // joins the text blocks, skips the others
	n := 0
	eachElement(content, func(b string) bool {
		if blockType(b) == `"tool_use"` {
			n++
		}
		return true
	})
	if n > 0 {
		st.Calls = p.newCalls(n)[:0]
	}
	eachElement(content, func(b string) bool {
		switch blockType(b) {
		case `"tool_use"`:
			var id, name, input string
			eachMember(b, func(k, v string) bool {
				switch {
				case rawKeyIs(k, "id"):
					id = v
				case rawKeyIs(k, "name"):
					name = v
				case rawKeyIs(k, "input"):
					input = v
				}
				return true
			})
			st.Calls = append(st.Calls, Call{ResultMessage: -1, ID: p.rawStr(id), Name: p.rawStr(name)})
			if rawKind(input) == '"' {
				input = p.rawStr(input) // some adapters send the JSON as text
			}
			p.setArgs(&st.Calls[len(st.Calls)-1], input)
		}
		return true
	})
	p.t.Steps = append(p.t.Steps, st)
}

// anthropicResults pairs the tool_result blocks of a user message with their
// calls. It reports whether the message held any.
func (p *parser) anthropicResults(i int, content string) bool {
	found := false
	eachElement(content, func(b string) bool {
		if blockType(b) != `"tool_result"` {
			return true
		}
		found = true
		var id, res string
		failed := false
		eachMember(b, func(k, v string) bool {
			switch {
			case rawKeyIs(k, "tool_use_id"):
				id = v
			case rawKeyIs(k, "content"):
				res = v
			case rawKeyIs(k, "is_error"):
				failed = v == "true"
			}
			return true
		})
		if rawKind(id) != '"' {
			return true
		}
		c := p.findCall(id, "")
		if c == nil {
			return true // orphan result: its call is not in the history
		}
		p.setResult(c, i, p.text(res))
		if failed {
			p.markError(c)
		}
		return true
	})
	return found
}

// blockType returns the raw "type" member of a content block, "" if none.
func blockType(b string) string {
	typ := ""
	eachMember(b, func(k, v string) bool {
		if rawKeyIs(k, "type") {
			typ = v
			return false
		}
		return true
	})
	return typ
}

// markError makes a result the client flagged as failed (is_error) an
// error, when its text did not already read as one: its signature is the
// last line of output, under the kind "is_error".
func (p *parser) markError(c *Call) {
	if c.IsError {
		return
	}
	c.IsError = true
	const kind = "is_error: "
	line := lastOutputLine(c.Result)
	p.ar.reserve(len(kind) + len(line) + 16)
	m := p.ar.mark()
	p.ar.buf = append(p.ar.buf, kind...)
	if line != "" {
		p.ar.buf, p.tmp2 = appendErrorSig(p.ar.buf, p.tmp2, line)
	}
	if len(p.ar.buf)-m > 240 {
		p.ar.buf = p.ar.buf[:m+240]
	}
	c.setError(p.ar.since(m))
}
