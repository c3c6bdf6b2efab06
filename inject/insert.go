package inject

import (
	"errors"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"

	"github.com/tidwall/gjson"
)

// Errors returned for bodies inject cannot patch. The proxy fails open on
// them: the original request goes upstream unchanged.
var (
	ErrNoMessages = errors.New("inject: request has no messages array")
	ErrMalformed  = errors.New("inject: malformed chat request")
)

// Roles that matter for placement.
func isToolRole(r string) bool   { return r == "tool" || r == "function" }
func isSystemRole(r string) bool { return r == "system" || r == "developer" }

// message is one element of request.messages, located in the body.
type message struct {
	at   int    // offset of the message object in the body
	raw  string // the object's bytes (a view of the body)
	role string
}

// shape is what placement needs to know about a history.
type shape struct {
	arr       span    // the messages array
	n         int     // number of messages
	last      message // the last message; role "" when there is none
	lastTool  message // the last tool or function message
	firstSyst message // the first system or developer message
}

// scan finds the messages that placement p may touch. It reads the roles of
// as few messages as it can: the last one; for Tool walking back to the last
// tool message; for System forward to the first system message.
func scan(body []byte, p Placement) (shape, error) {
	var s shape
	var buf [64]span
	arr, elems, found, _ := findMessages(body, buf[:0])
	if !found {
		return s, ErrNoMessages
	}
	s.arr, s.n = arr, len(elems)
	msg := func(e span) (message, bool) {
		if body[e.start] != '{' {
			return message{}, false
		}
		raw := rawjson.View(body[e.start:e.end])
		return message{at: e.start, raw: raw, role: gjson.Get(raw, "role").String()}, true
	}
	for i := len(elems) - 1; i >= 0; i-- {
		m, ok := msg(elems[i])
		if !ok {
			return s, ErrMalformed
		}
		if i == len(elems)-1 {
			s.last = m
		}
		if isToolRole(m.role) {
			s.lastTool = m
		}
		if p != Tool || isToolRole(m.role) {
			break
		}
	}
	for _, e := range elems {
		if p != System {
			break
		}
		m, ok := msg(e)
		if !ok {
			return s, ErrMalformed
		}
		if isSystemRole(m.role) {
			s.firstSyst = m
			break
		}
	}
	return s, nil
}

// scanLayout builds the shape from a known layout, for the placements that
// need only the last message (Auto, User, and Tool when the last message is a
// tool result). ok is false when the layout is unknown, does not fit the
// body, or the placement needs more: the caller scans instead.
func scanLayout(body []byte, p Placement, l inspect.Layout) (s shape, ok bool) {
	a, z := l.Messages, l.Last
	if a[1] == 0 || a[0] >= z[0] || z[0] >= z[1] || z[1] >= a[1] || a[1] > len(body) ||
		body[a[0]] != '[' || body[a[1]-1] != ']' || body[z[0]] != '{' || body[z[1]-1] != '}' {
		return s, false
	}
	raw := rawjson.View(body[z[0]:z[1]])
	last := message{at: z[0], raw: raw, role: gjson.Get(raw, "role").String()}
	switch p {
	case Auto, "", User:
	case Tool:
		if !isToolRole(last.role) {
			return s, false
		}
	default:
		return s, false
	}
	s.arr, s.n, s.last = span{a[0], a[1]}, 1, last
	if isToolRole(last.role) {
		s.lastTool = last
	}
	return s, true
}

// splice is one edit of the body: replace body[start:end] with ins.
type splice struct {
	start, end int
	ins        []byte
}

// apply builds the new body in one allocation; every byte outside
// [start,end) is copied unchanged.
func (sp splice) apply(body []byte) []byte { return sp.applyTo(nil, body) }

// applyTo builds the new body in dst when it has room, else in a new slice.
func (sp splice) applyTo(dst, body []byte) []byte {
	n := len(body) - (sp.end - sp.start) + len(sp.ins)
	out := dst[:0]
	if cap(out) < n {
		out = make([]byte, 0, n)
	}
	out = append(out, body[:sp.start]...)
	out = append(out, sp.ins...)
	return append(out, body[sp.end:]...)
}

// insert adds text to the chat request body at placement p (Auto when
// empty) and returns the new body, built in dst when dst has room, and the
// placement actually used, which differs from p when the history has no
// place of that kind (Tool without a tool message becomes User). l is the
// messages' layout when the caller knows it.
//
// Only the insertion point changes: appended to a string content, the
// original string's bytes stay as they were (its escapes are not
// re-encoded), so removing the inserted bytes gives back body exactly. body
// is not modified.
func insert(dst, body []byte, p Placement, text string, l inspect.Layout) ([]byte, Placement, error) {
	s, ok := scanLayout(body, p, l)
	if !ok {
		var err error
		if s, err = scan(body, p); err != nil {
			return nil, "", err
		}
	}
	sp, used, err := s.place(p, text)
	if err != nil {
		return nil, "", err
	}
	return sp.applyTo(dst, body), used, nil
}

// place decides where text goes.
func (s shape) place(p Placement, text string) (splice, Placement, error) {
	switch p {
	case Tool:
		if s.lastTool.raw != "" {
			if sp, ok := appendContent(s.lastTool, text); ok {
				return sp, Tool, nil
			}
		}
		return s.placeUser(text)
	case User:
		return s.placeUser(text)
	case System:
		if s.firstSyst.raw != "" {
			if sp, ok := appendContent(s.firstSyst, text); ok {
				return sp, System, nil
			}
			// A system message whose content we cannot extend: a second
			// system message would break strict templates, so use a user one.
			return s.placeUser(text)
		}
		return s.addMessage(0, "system", text), System, nil
	case Auto, "":
		if isToolRole(s.last.role) {
			if sp, ok := appendContent(s.last, text); ok {
				return sp, Tool, nil
			}
		}
		return s.placeUser(text)
	}
	return splice{}, "", errors.New("inject: unknown placement " + string(p))
}

// placeUser appends to a trailing user message, or adds one: never two user
// messages in a row.
func (s shape) placeUser(text string) (splice, Placement, error) {
	if s.last.role == "user" {
		if sp, ok := appendContent(s.last, text); ok {
			return sp, User, nil
		}
	}
	return s.addMessage(s.n, "user", text), User, nil
}

// addMessage inserts {"role":role,"content":text} at index i of the messages
// array (0 or the end).
func (s shape) addMessage(i int, role, text string) splice {
	msg := make([]byte, 0, len(text)+48)
	msg = append(msg, `{"role":"`...)
	msg = append(msg, role...)
	msg = append(msg, `","content":`...)
	msg = rawjson.AppendQuote(msg, text)
	msg = append(msg, '}')
	if i == 0 {
		// After the '[': the new message, then a comma if others follow.
		at := s.arr.start + 1
		if s.n > 0 {
			msg = append(msg, ',')
		}
		return splice{start: at, end: at, ins: msg}
	}
	at := s.arr.end - 1 // the closing ']'
	if s.n > 0 {
		msg = append([]byte{','}, msg...)
	}
	return splice{start: at, end: at, ins: msg}
}

// appendContent appends text to a message's content: to a string after a
// blank line, to an array of parts as a new text part, to a null or absent
// content by setting it. It reports false for content of any other type.
func appendContent(m message, text string) (splice, bool) {
	c := gjson.Get(m.raw, "content")
	switch {
	case !c.Exists():
		// {"role":"tool",...} -> {"content":"text","role":"tool",...}
		ins := append([]byte(`"content":`), rawjson.AppendQuote(nil, text)...)
		if hasMembers(m.raw) {
			ins = append(ins, ',')
		}
		at := m.at + 1
		return splice{start: at, end: at, ins: ins}, true
	case c.Index <= 0:
		return splice{}, false
	case c.Type == gjson.Null:
		start := m.at + c.Index
		return splice{start: start, end: start + len(c.Raw), ins: rawjson.AppendQuote(nil, text)}, true
	case c.Type == gjson.String:
		// Splice before the closing quote so the original string keeps its
		// own bytes (its escapes, its \u sequences) untouched.
		at := m.at + c.Index + len(c.Raw) - 1
		ins := make([]byte, 0, len(text)+8)
		if len(c.Raw) > 2 {
			ins = rawjson.AppendEscaped(ins, "\n\n")
		}
		return splice{start: at, end: at, ins: rawjson.AppendEscaped(ins, text)}, true
	case c.IsArray():
		at := m.at + c.Index + len(c.Raw) - 1 // the closing ']'
		ins := make([]byte, 0, len(text)+32)
		if hasMembers(c.Raw) {
			ins = append(ins, ',')
		}
		ins = append(ins, `{"type":"text","text":`...)
		ins = rawjson.AppendQuote(ins, text)
		return splice{start: at, end: at, ins: append(ins, '}')}, true
	}
	return splice{}, false
}

// hasMembers reports whether a JSON object or array has anything between its
// brackets.
func hasMembers(raw string) bool {
	for i := 1; i < len(raw)-1; i++ {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return true
		}
	}
	return false
}
