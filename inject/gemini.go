package inject

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// Gemini's API (generateContent) keeps its conversation in "contents":
// user and "model" contents of parts ({"text"}, {"functionCall": {name,
// args}}, {"functionResponse": {name, response}}), its system prompt in
// "systemInstruction". Code Assist, as Gemini CLI signed in with Google
// calls it, wraps the same request as {"model", "project", "request":
// {...}} and each answer as {"response": {...}}. Every function here takes
// the wrapping member's path prefix: "" for Gemini, "request." for Code
// Assist. A part has no "type": Gemini refuses unknown fields.

// codeAssist is the registry's entry of Code Assist, whose members wrap
// Gemini's requests and answers.
var codeAssist = wireapi.Lookup(wireapi.CodeAssist)

// geminiPrefix is the path prefix of the request's members: the wrapping
// member's, or none.
func geminiPrefix(wrapped bool) string {
	if wrapped {
		return codeAssist.Wrap + "."
	}
	return ""
}

// ApplyGemini is Apply for a Gemini generateContent body, wrapped as Code
// Assist's when wrapped: first the collapses the edit asks for (see
// CollapseGemini), then one insertion of the edit's texts at the placement
// configured for the request's model (see InsertGemini). On error the
// caller sends the original body (fail open); body is not modified.
func (in *Injector) ApplyGemini(body []byte, e Edit, wrapped bool) (Result, error) {
	return in.applyTexts(body, e, func(b []byte, calls []inspect.CallRef) ([]byte, Collapsed, error) {
		return in.CollapseGemini(b, calls, wrapped)
	}, func(b []byte, p Placement, text string) ([]byte, Placement, error) {
		return InsertGemini(b, p, text, wrapped)
	})
}

// InsertGemini adds text to a Gemini body (Code Assist's when wrapped) as
// a text part and returns the new body and the placement used:
//
//   - Tool adds the part to the last user content that carries
//     functionResponse parts, after them; without one it falls back to
//     User;
//   - User adds it to a trailing user content, else adds a user content;
//   - System adds it to systemInstruction's parts, adding
//     systemInstruction when absent;
//   - Auto is Tool when the last content is a user turn of function
//     responses, else User.
//
// Only the insertion point changes; every other byte is kept.
func InsertGemini(body []byte, p Placement, text string, wrapped bool) ([]byte, Placement, error) {
	return insertGemini(body, p, text, geminiPrefix(wrapped))
}

func insertGemini(body []byte, p Placement, text, prefix string) ([]byte, Placement, error) {
	b := rawjson.View(body)
	if !rawjson.Valid(body) || !gjson.Parse(b).IsObject() {
		return nil, "", ErrMalformed
	}
	// root is where the request's object opens, rootRaw the object.
	root, rootRaw := rawjson.SkipSpace(b, 0), b
	if prefix != "" {
		r := gjson.Get(b, strings.TrimSuffix(prefix, "."))
		if !r.IsObject() || r.Index <= 0 {
			return nil, "", ErrMalformed
		}
		root, rootRaw = r.Index, r.Raw
	}
	if p == System {
		sys := gjson.Get(b, prefix+"systemInstruction")
		if sys.IsObject() && sys.Index > 0 {
			if sp, ok := geminiPartSplice(sys.Index, sys.Raw, text); ok {
				return sp.apply(body), System, nil
			}
		}
		if sys.Exists() {
			return nil, "", ErrMalformed
		}
		ins := append([]byte(`"systemInstruction":{"parts":[{"text":`), rawjson.AppendQuote(nil, text)...)
		ins = append(ins, "}]}"...)
		if hasMembers(strings.TrimSpace(rootRaw)) {
			ins = append(ins, ',')
		}
		return splice{start: root + 1, end: root + 1, ins: ins}.apply(body), System, nil
	}
	contents := gjson.Get(b, prefix+"contents")
	if !contents.IsArray() || contents.Index <= 0 {
		return nil, "", ErrNoMessages
	}
	var last, lastResults gjson.Result
	n := 0
	contents.ForEach(func(_, c gjson.Result) bool {
		n++
		last = c
		if geminiUser(c) && geminiResults(c) {
			lastResults = c
		}
		return true
	})
	switch p {
	case Tool, Auto, "":
		if lastResults.Exists() && (p == Tool || last.Index == lastResults.Index) {
			if sp, ok := geminiPartSplice(lastResults.Index, lastResults.Raw, text); ok {
				return sp.apply(body), Tool, nil
			}
		}
	case User:
	default:
		return nil, "", errors.New("inject: unknown placement " + string(p))
	}
	if n > 0 && geminiUser(last) {
		if sp, ok := geminiPartSplice(last.Index, last.Raw, text); ok {
			return sp.apply(body), User, nil
		}
	}
	c := append([]byte(`{"role":"user","parts":[{"text":`), rawjson.AppendQuote(nil, text)...)
	c = append(c, "}]}"...)
	at := contents.Index + len(contents.Raw) - 1
	if n > 0 {
		c = append([]byte{','}, c...)
	}
	return splice{start: at, end: at, ins: c}.apply(body), User, nil
}

// geminiUser reports a user content: role "user", or none (Gemini's
// default).
func geminiUser(c gjson.Result) bool {
	r := c.Get("role")
	return !r.Exists() || r.String() == "user"
}

// geminiResults reports a content with functionResponse parts.
func geminiResults(c gjson.Result) bool {
	found := false
	c.Get("parts").ForEach(func(_, p gjson.Result) bool {
		found = p.Get("functionResponse").Exists()
		return !found
	})
	return found
}

// geminiPartSplice returns the splice that appends a text part to the
// "parts" of the content raw at offset at (adding parts when absent).
func geminiPartSplice(at int, raw, text string) (splice, bool) {
	if at < 0 || len(raw) < 2 || raw[0] != '{' {
		return splice{}, false
	}
	part := append([]byte(`{"text":`), rawjson.AppendQuote(nil, text)...)
	part = append(part, '}')
	parts := gjson.Get(raw, "parts")
	switch {
	case !parts.Exists():
		ins := append(append([]byte(`"parts":[`), part...), ']')
		if hasMembers(raw) {
			ins = append(ins, ',')
		}
		return splice{start: at + 1, end: at + 1, ins: ins}, true
	case parts.IsArray() && parts.Index > 0:
		end := at + parts.Index + len(parts.Raw) - 1
		if hasMembers(parts.Raw) {
			part = append([]byte{','}, part...)
		}
		return splice{start: end, end: end, ins: part}, true
	}
	return splice{}, false
}

// CollapseGemini is Collapse for a Gemini body (Code Assist's when
// wrapped): a turn is a model content with functionCall parts, its results
// the following user content made of functionResponse parts alone. Calls
// without ids (Gemini CLI sends none) are paired with their responses by
// name, in order, as the API pairs them. A removed turn takes its results
// along, so every call left stays answered and user and model turns still
// alternate; the note is a text part after the kept results.
func (in *Injector) CollapseGemini(body []byte, calls []inspect.CallRef, wrapped bool) ([]byte, Collapsed, error) {
	key := geminiPrefix(wrapped) + "contents"
	arr := gjson.Get(rawjson.View(body), key)
	if !arr.IsArray() {
		return body, Collapsed{}, ErrNoMessages
	}
	if len(calls) == 0 {
		return body, Collapsed{}, nil
	}
	h := history{key: key, size: len(arr.Raw), note: func(raw, text string) (splice, bool) {
		return geminiPartSplice(0, raw, text)
	}}
	arr.ForEach(func(_, v gjson.Result) bool {
		m := histMsg{raw: v.Raw, items: 1}
		user := geminiUser(v)
		results := user
		names := map[string]int{}
		v.Get("parts").ForEach(func(_, p gjson.Result) bool {
			switch {
			case p.Get("functionCall").Exists():
				m.ids = append(m.ids, geminiCallID(p.Get("functionCall"), names))
			case p.Get("functionResponse").Exists():
				m.answers = append(m.answers, geminiCallID(p.Get("functionResponse"), names))
			default:
				results = false
			}
			return true
		})
		switch {
		case v.Get("role").String() == "model":
			m.role = "assistant"
		case user:
			m.role, m.user = "user", true
			if results && len(m.answers) > 0 {
				m.role = "tool"
			}
		}
		h.msgs = append(h.msgs, m)
		return true
	})
	return in.collapse(body, h, geminiCallRefs(calls))
}

// geminiCallID is a call's or a response's id, or for one without, its
// name and its rank among the content's parts of that name: the
// functionCall and functionResponse of one call get the same.
func geminiCallID(v gjson.Result, names map[string]int) string {
	if id := v.Get("id"); id.Exists() {
		return id.String()
	}
	name := v.Get("name").String()
	k := names[name]
	names[name] = k + 1
	return geminiNamedID(name, k)
}

func geminiNamedID(name string, k int) string {
	return "\x00" + name + "\x00" + strconv.Itoa(k)
}

// geminiCallRefs gives the refs of calls without an id the ids
// geminiCallID gives them, by their order within their content.
func geminiCallRefs(calls []inspect.CallRef) []inspect.CallRef {
	type key struct {
		msg  int
		name string
	}
	var out []inspect.CallRef
	seen := map[key]int{}
	for i, c := range calls {
		if c.ToolCallID != "" {
			continue
		}
		if out == nil {
			out = append([]inspect.CallRef(nil), calls...)
		}
		k := key{c.Message, c.Name}
		out[i].ToolCallID = geminiNamedID(c.Name, seen[k])
		seen[k]++
	}
	if out == nil {
		return calls
	}
	return out
}

// GeminiForm is how a Gemini request asks to be answered, which its path
// and query say, not its body.
type GeminiForm struct {
	// Stream: streamGenerateContent. SSE: with alt=sse, the events an
	// event stream; else the elements of one JSON array.
	Stream, SSE bool
	// Wrapped: Code Assist's, each answer under "response".
	Wrapped bool
	// Model is the model the path names, "" when none (Code Assist's is
	// the body's).
	Model string
}

// Gemini's error statuses for loopguard's error answers. LOOP_DETECTED: a
// precondition of the request (the agent's history) failed, which clients
// do not retry. BUDGET_EXCEEDED: the session's quota is spent, Google's
// RESOURCE_EXHAUSTED; the HTTP status stays Config.ErrorStatus, not the
// 429 Google pairs it with, which clients retry.
const (
	geminiLoopStatus   = "FAILED_PRECONDITION"
	geminiBudgetStatus = "RESOURCE_EXHAUSTED"
)

// TerminateGemini is Terminate for a Gemini request: HTTP 200 with one
// answer whose model content is a text part starting with LOOP_DETECTED:
// and whose finishReason is STOP, wrapped under "response" for Code
// Assist; for streamGenerateContent that answer as the one event of an
// event stream (alt=sse) or the one element of a JSON array. With
// terminate_as = "error" it is Google's error shape {"error":{"code",
// "message","status"}} with Config.ErrorStatus, its status
// FAILED_PRECONDITION (RESOURCE_EXHAUSTED for l.Budget). With l.Budget the
// text is BUDGET_EXCEEDED's.
func (in *Injector) TerminateGemini(body []byte, l Loop, f GeminiForm) (Response, error) {
	content, err := in.TerminateText(l)
	if err != nil {
		return Response{}, err
	}
	if in.cfg.TerminateAs == AsError {
		status := geminiLoopStatus
		if l.Budget != nil {
			status = geminiBudgetStatus
		}
		b := append([]byte(`{"error":{"code":`), strconv.Itoa(in.cfg.ErrorStatus)...)
		b = append(b, `,"message":`...)
		b = rawjson.AppendQuote(b, content)
		b = append(b, `,"status":"`...)
		b = append(b, status...)
		b = append(b, `"}}`...)
		return in.errorAnswer(b), nil
	}
	model := f.Model
	if model == "" {
		model = gjson.GetBytes(body, "model").String()
	}
	if model == "" {
		model = "loopguard"
	}
	c := GeminiChunk{Text: content, FinishReason: "STOP", Model: model, ResponseID: in.hexID("loopguard-"), Wrapped: f.Wrapped}
	switch {
	case f.Stream && f.SSE:
		return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", contentSSE}, {"Cache-Control", "no-cache"}},
			Body: AppendGeminiEvent(nil, c, true)}, nil
	case f.Stream:
		b := append([]byte{'['}, c.Append(nil)...)
		return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", contentJSON}}, Body: append(b, ']')}, nil
	}
	return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", contentJSON}}, Body: c.Append(nil)}, nil
}

// GeminiChunk is one answer (GenerateContentResponse) loopguard writes: the
// LOOP_DETECTED answer, or the last chunk of a cut stream.
type GeminiChunk struct {
	// Text is the model content's one text part; "" writes a content
	// without parts.
	Text string
	// FinishReason is the candidate's finishReason ("STOP", "MAX_TOKENS").
	FinishReason string
	// FinishMessage, when set, is the candidate's finishMessage: why the
	// answer ended, in words.
	FinishMessage string
	// PromptTokens and OutputTokens are the usageMetadata's counts.
	PromptTokens, OutputTokens int
	Model, ResponseID          string
	// Wrapped: under "response", as Code Assist answers.
	Wrapped bool
}

// Append appends c as one JSON object.
func (c GeminiChunk) Append(b []byte) []byte {
	if c.Wrapped {
		b = append(b, '{')
		b = rawjson.AppendQuote(b, codeAssist.AnswerWrap)
		b = append(b, ':')
	}
	b = append(b, `{"candidates":[{"content":{"role":"model","parts":[`...)
	if c.Text != "" {
		b = append(b, `{"text":`...)
		b = rawjson.AppendQuote(b, c.Text)
		b = append(b, '}')
	}
	b = append(b, `]},"finishReason":`...)
	b = rawjson.AppendQuote(b, c.FinishReason)
	if c.FinishMessage != "" {
		b = append(b, `,"finishMessage":`...)
		b = rawjson.AppendQuote(b, c.FinishMessage)
	}
	b = append(b, `,"index":0}],"usageMetadata":{"promptTokenCount":`...)
	b = strconv.AppendInt(b, int64(c.PromptTokens), 10)
	b = append(b, `,"candidatesTokenCount":`...)
	b = strconv.AppendInt(b, int64(c.OutputTokens), 10)
	b = append(b, `,"totalTokenCount":`...)
	b = strconv.AppendInt(b, int64(c.PromptTokens+c.OutputTokens), 10)
	b = append(b, `},"modelVersion":`...)
	b = rawjson.AppendQuote(b, c.Model)
	if c.ResponseID != "" {
		b = append(b, `,"responseId":`...)
		b = rawjson.AppendQuote(b, c.ResponseID)
	}
	b = append(b, '}')
	if c.Wrapped {
		b = append(b, '}')
	}
	return b
}

// AppendGeminiEvent appends c as an SSE event, "data: " and the object, as
// Google frames them (CRLF line ends); sse false appends it as the next
// element of a JSON array already open and closes the array.
func AppendGeminiEvent(b []byte, c GeminiChunk, sse bool) []byte {
	if !sse {
		b = append(b, ",\r\n"...)
		b = c.Append(b)
		return append(b, ']')
	}
	b = append(b, "data: "...)
	b = c.Append(b)
	return append(b, "\r\n\r\n"...)
}

// AppendGeminiCut appends the end of a cut Gemini stream: in an event
// stream a comment ": loopguard cut category=..." and the last chunk; in a
// JSON array, which has no comments, the last element and the closing
// bracket. The last chunk's finishMessage says the same. The proxy then
// closes the upstream connection.
func AppendGeminiCut(b []byte, category string, c GeminiChunk, sse bool) []byte {
	c.FinishMessage = "loopguard cut category=" + strings.TrimSpace(category)
	if sse {
		b = append(b, ": "...)
		b = append(b, c.FinishMessage...)
		b = append(b, "\r\n\r\n"...)
	}
	return AppendGeminiEvent(b, c, sse)
}
