package policy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"strings"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// A request's session identity is derived here, and only here: from the
// session id the client named (the proxy reads it off the request,
// proxy/session_id.go) and the request body (Identify), then told apart
// from earlier runs of the same prompt with the store (Policy.Session).

// MaxKeyLen bounds a session key in bytes. Longer client-supplied ids are
// replaced by their hash so that keys stay cheap as map keys, redis keys and
// header values.
const MaxKeyLen = 128

// Prefixes of keys that loopguard made up rather than read from the client.
const (
	// derivedPrefix marks a key hashed from the conversation's opening.
	derivedPrefix = "h:"
	// hashedPrefix marks a client id that was too long or held bytes that
	// cannot go into a header value.
	hashedPrefix = "x:"
)

// Identity names the session of one request, before the store is asked.
type Identity struct {
	// Key is the session key: the client's session id (the first session
	// header present, or the /s/<id>/ prefix of the request path), else the
	// body's `user`, else `metadata.session_id` (Anthropic clients such as
	// Claude Code put theirs in metadata.user_id, used alike), else "h:" and
	// 16 hex digits hashing the conversation's opening as the API carries it
	// (chat: the model, the first system message and the first user
	// message): what the first request of a run already has, so the key does
	// not change once the model has answered.
	//
	// Client ids are used as they are when they are at most MaxKeyLen
	// printable ASCII bytes; otherwise they become "x:" and the hash of the
	// id, because the key is echoed in the X-Loopguard-Session header and a
	// CR or LF there would let a request body inject response headers.
	Key string
	// Turn is 16 hex digits hashing the conversation's first assistant turn
	// (its tool-call ids, unique per run, or its text) when Key is derived
	// and the history has such a turn; "" otherwise.
	Turn string
}

// Identify returns the Identity of a request of api: header is the session
// id the client named (nil when there is none), body the request. Two runs
// of one task from the same prompt share a derived key; Identity.Turn and
// Policy.Session tell them apart by their first assistant turns. body is
// untrusted: Identify never panics and does not keep body.
func Identify(api inspect.API, header, body []byte) Identity {
	if k := clientKey(header); k != "" {
		return Identity{Key: k}
	}
	// One pass over the top-level members: "messages" may be megabytes
	// long and come first, and a Get per field would scan it again each time
	// (rawjson.Members skips it several times faster than gjson's ForEach).
	var f Fields
	rawjson.Members(rawjson.View(body), func(k, raw string) bool {
		f.Add(k, raw)
		return true
	})
	return IdentifyFields(api, header, &f)
}

// Named reports whether header, the session id a client sent, names the
// session by itself: Identify then reads nothing of the body.
func Named(header []byte) bool { return len(trimSpace(header)) > 0 }

// IdentifyFields is Identify for a body whose top-level members all went
// through f.Add, for a caller that walks them anyway: a long history is
// then skipped once, not twice. f must not outlive the body.
func IdentifyFields(api inspect.API, header []byte, f *Fields) Identity {
	if k := clientKey(header); k != "" {
		return Identity{Key: k}
	}
	// Everything read from the body is copied or hashed before returning.
	if k := clientKey(stringBytes(f.user)); k != "" {
		return Identity{Key: k}
	}
	if k := clientKey(stringBytes(f.metadata.Get("session_id"))); k != "" {
		return Identity{Key: k}
	}
	if k := clientKey(stringBytes(f.session)); k != "" {
		return Identity{Key: k}
	}
	shape, name := conversationShapeOf(api)
	if shape.userID != nil {
		if k := clientKey(shape.userID(f.metadata.Get("user_id"))); k != "" {
			return Identity{Key: k}
		}
	}
	o := shape.opening(f.history, f.system)
	o.api = name
	return derivedIdentity(o, f)
}

// conversationShape is how the requests of one form of history carry what
// identifies their conversation.
type conversationShape struct {
	// opening reads the conversation's first turns from the history and
	// the system member (the values, not *Fields: a pointer handed to a
	// function value would move every request's Fields to the heap).
	opening func(history, system gjson.Result) opening
	// userID, if not nil, returns the session id a client keeps in
	// metadata.user_id, nil if there is none.
	userID func(gjson.Result) []byte
}

// conversationShapes holds the reader of each form of history the
// registry's APIs write (internal/wireapi: API.Turns).
var conversationShapes = [...]conversationShape{
	wireapi.Messages: {opening: chatOpening},
	wireapi.Items:    {opening: responsesOpening},
	wireapi.Blocks:   {opening: anthropicOpening, userID: claudeSession},
	wireapi.Parts:    {opening: geminiOpening},
}

// conversationShapeOf returns the shape of api's history, and the name its
// derived keys hash: "" for histories of chat messages, whose keys hash no
// name, as they always have, so that keys stored by earlier versions go on
// naming their sessions. An API the registry does not know reads as chat.
func conversationShapeOf(api inspect.API) (conversationShape, string) {
	a := wireapi.Lookup(api)
	if a == nil || a.Turns == wireapi.Messages {
		return conversationShapes[wireapi.Messages], ""
	}
	return conversationShapes[a.Turns], string(a.Name)
}

// claudeSession returns the session id in Claude Code's metadata.user_id,
// so that a request keyed by it and one keyed by the x-claude-code-session-id
// header (the same id) land in one session. Claude Code writes the user_id
// as a JSON object with a session_id member, and before that as
// "user_<hash>_account_<uuid>_session_<uuid>"; any other user_id is the key
// as it is.
func claudeSession(r gjson.Result) []byte {
	id := stringBytes(r)
	if len(id) == 0 {
		return nil
	}
	if id[0] == '{' {
		if s := gjson.GetBytes(id, "session_id"); s.Type == gjson.String && s.Str != "" {
			return []byte(s.Str)
		}
		return id
	}
	if i := bytes.LastIndex(id, []byte("_session_")); i >= 0 && i+len("_session_") < len(id) {
		return id[i+len("_session_"):]
	}
	return id
}

// Fields are the top-level members of a request that name its session,
// gathered by Add; they alias the body.
type Fields struct {
	user, metadata, history, system gjson.Result
	// session is the session_id of a wrapped request (Code Assist's,
	// which Gemini CLI fills with its own session id).
	session gjson.Result
	model   string
}

// Add keeps the top-level member key, whose value is raw, when it is one
// that names the session: user, metadata, model, or a registry API's
// history or system member (internal/wireapi); the members of one that
// wraps the request are read as top-level ones.
func (f *Fields) Add(key, raw string) {
	switch key {
	case "user":
		f.user = gjson.Parse(raw)
		return
	case "metadata":
		f.metadata = gjson.Parse(raw)
		return
	case "model":
		f.model = gjson.Parse(raw).String()
		return
	case "":
		return
	}
	for i := range wireapi.APIs {
		a := &wireapi.APIs[i]
		switch key {
		case a.History:
			f.history = gjson.Parse(raw)
			return
		case a.System:
			f.system = gjson.Parse(raw)
			return
		case a.Wrap:
			rawjson.Members(raw, func(k, v string) bool {
				switch k {
				case key:
				case "session_id":
					f.session = gjson.Parse(v)
				default:
					f.Add(k, v)
				}
				return true
			})
			return
		}
	}
}

// stringBytes returns the raw text of a JSON string or number, nil for
// anything else: an object as `user` is no session id.
func stringBytes(r gjson.Result) []byte {
	switch r.Type {
	case gjson.String, gjson.Number:
		return []byte(r.String())
	}
	return nil
}

// clientKey trims and checks a client-supplied id.
func clientKey(b []byte) string {
	b = trimSpace(b)
	if len(b) == 0 {
		return ""
	}
	if len(b) > MaxKeyLen || !printable(b) {
		h := fnv.New64a()
		h.Write(b)
		return hashedPrefix + hex16(h.Sum64())
	}
	return string(b)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// printable reports whether b is visible ASCII or space: safe as a header
// value and as a log field.
func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// derivedIdentity hashes the opening o of the conversation. Each field is
// written with its length so that moving bytes between fields changes the
// hash.
func derivedIdentity(o opening, f *Fields) Identity {
	h := fnvOffset
	h.field(f.model)
	h.field(o.system)
	h.field(o.user)
	if o.api != "" {
		h.field(o.api)
	}
	var key [len(derivedPrefix) + 16]byte
	id := Identity{Key: string(appendHex16(append(key[:0], derivedPrefix...), uint64(h)))}
	if o.haveAssistant {
		h = fnvOffset
		h.field(o.assistant)
		id.Turn = hex16(uint64(h))
	}
	return id
}

// fnv64 is FNV-1a, as hash/fnv's New64a computes it, over strings: a
// hash.Hash would move itself and every []byte(s) written to it to the
// heap, a copy of the system prompt per request.
type fnv64 uint64

const (
	fnvOffset fnv64 = 14695981039346656037
	fnvPrime  fnv64 = 1099511628211
)

func (h *fnv64) add(s string) {
	for i := 0; i < len(s); i++ {
		*h ^= fnv64(s[i])
		*h *= fnvPrime
	}
}

// field adds s after its length, eight bytes little-endian.
func (h *fnv64) field(s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.add(string(n[:]))
	h.add(s)
}

// opening is what identifies a conversation: its first system, user and
// assistant turns, and the API it is held in.
type opening struct {
	system, user, assistant string
	// api is the API's name, "" for chat. Runs of one prompt on two APIs
	// are two runs, but their openings read alike: without it, the one
	// that answered first would claim the key (Policy.Session), and the
	// other run's first request would land in its session, apart from the
	// rest of its own run. Chat's keys hash without it, as they always
	// have, so that keys stored by earlier versions go on naming their
	// sessions.
	api                                 string
	haveSystem, haveUser, haveAssistant bool
}

func (o *opening) complete() bool { return o.haveSystem && o.haveUser && o.haveAssistant }

func chatOpening(history, _ gjson.Result) (o opening) {
	history.ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").String() {
		case "system", "developer":
			if !o.haveSystem {
				o.system, o.haveSystem = contentText(m.Get("content")), true
			}
		case "user":
			if !o.haveUser {
				o.user, o.haveUser = contentText(m.Get("content")), true
			}
		case "assistant":
			if !o.haveAssistant {
				o.assistant, o.haveAssistant = assistantTurn(m), true
			}
		}
		return !o.complete()
	})
	return o
}

func anthropicOpening(history, system gjson.Result) (o opening) {
	o.system, o.haveSystem = contentText(system), true
	history.ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").String() {
		case "user":
			if !o.haveUser {
				o.user, o.haveUser = contentText(m.Get("content")), true
			}
		case "assistant":
			if !o.haveAssistant {
				var ids strings.Builder
				m.Get("content").ForEach(func(_, b gjson.Result) bool {
					if b.Get("type").String() == "tool_use" {
						ids.WriteString(b.Get("id").String())
						ids.WriteByte(0)
					}
					return true
				})
				o.assistant, o.haveAssistant = ids.String(), true
				if o.assistant == "" {
					o.assistant = contentText(m.Get("content"))
				}
			}
		}
		return !o.complete()
	})
	return o
}

func responsesOpening(input, system gjson.Result) (o opening) {
	o.system, o.haveSystem = system.String(), true
	if input.Type == gjson.String {
		o.user = input.String()
		return o
	}
	input.ForEach(func(_, it gjson.Result) bool {
		typ := it.Get("type").String()
		switch {
		case typ == "function_call" || typ == "custom_tool_call" || typ == "local_shell_call":
			if !o.haveAssistant {
				o.assistant, o.haveAssistant = it.Get("call_id").String(), true
			}
		case typ == "message" || typ == "":
			switch it.Get("role").String() {
			case "user":
				if !o.haveUser {
					o.user, o.haveUser = contentText(it.Get("content")), true
				}
			case "system", "developer":
				if o.system == "" {
					o.system = contentText(it.Get("content"))
				}
			case "assistant":
				if !o.haveAssistant {
					o.assistant, o.haveAssistant = contentText(it.Get("content")), true
				}
			}
		}
		return !o.complete()
	})
	return o
}

// geminiOpening reads Gemini contents: systemInstruction's parts, the first
// user content, and the first model content, identified by its calls (ids
// when it has them; Gemini CLI's have none, so name and arguments) or its
// text.
func geminiOpening(contents, system gjson.Result) (o opening) {
	o.system, o.haveSystem = contentText(system.Get("parts")), true
	contents.ForEach(func(_, c gjson.Result) bool {
		switch c.Get("role").String() {
		case "user", "":
			if !o.haveUser {
				o.user, o.haveUser = contentText(c.Get("parts")), true
			}
		case "model":
			if !o.haveAssistant {
				var calls strings.Builder
				c.Get("parts").ForEach(func(_, p gjson.Result) bool {
					if fc := p.Get("functionCall"); fc.Exists() {
						if id := fc.Get("id"); id.Exists() {
							calls.WriteString(id.String())
						} else {
							calls.WriteString(fc.Get("name").String() + "\x00" + fc.Get("args").Raw)
						}
						calls.WriteByte(0)
					}
					return true
				})
				o.assistant, o.haveAssistant = calls.String(), true
				if o.assistant == "" {
					o.assistant = contentText(c.Get("parts"))
				}
			}
		}
		return !o.complete()
	})
	return o
}

// assistantTurn identifies the first assistant turn by its tool-call ids,
// which are unique per run, or by its text when it made no calls.
func assistantTurn(m gjson.Result) string {
	var b strings.Builder
	m.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
		b.WriteString(c.Get("id").String())
		b.WriteByte(0)
		return true
	})
	if b.Len() > 0 {
		return b.String()
	}
	if fc := m.Get("function_call"); fc.Exists() {
		// Legacy function calls carry no id; name and arguments stand in.
		return fc.Get("name").String() + "\x00" + fc.Get("arguments").String()
	}
	return contentText(m.Get("content"))
}

// contentText returns a message content that is a string, or the text of
// its parts joined by newlines when it is an array of parts.
func contentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.String()
	}
	if !c.IsArray() {
		return ""
	}
	var b strings.Builder
	c.ForEach(func(_, p gjson.Result) bool {
		if t := p.Get("text"); t.Type == gjson.String {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(t.String())
		}
		return true
	})
	return b.String()
}

func hex16(v uint64) string {
	var b [16]byte
	return string(appendHex16(b[:0], v))
}

// appendHex16 appends v as 16 hex digits.
func appendHex16(dst []byte, v uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, "0123456789abcdef"[v>>shift&0xf])
	}
	return dst
}

// Session returns the session key of a request identified as id. A derived
// key is shared by every run that opened with the same model, system and
// user messages: the first of them whose history shows its first assistant
// turn claims the key (State.Opening), and another run's later requests get
// the key with their own turn appended. A run's first request has no
// assistant turn yet and keeps the shared key, so a run is never split in
// two; at worst the first request of a second run of the same prompt is
// counted with the run that claimed the key, and it has no history to judge.
//
// When the store fails, Session returns the shared key (fail open).
func (p *Policy) Session(ctx context.Context, id Identity) string {
	if id.Turn == "" {
		return id.Key
	}
	var owner string
	_, err := p.store.Update(ctx, id.Key, func(st *State) error {
		if st.Opening != "" {
			owner = st.Opening
			return errUnchanged
		}
		owner, st.Opening, st.Updated = id.Turn, id.Turn, p.now()
		return nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		p.log.Warn().Err(err).Str("session", id.Key).Msg("session store failed; keeping the derived key")
		return id.Key
	}
	if owner == id.Turn {
		return id.Key
	}
	return id.Key + "." + id.Turn
}
