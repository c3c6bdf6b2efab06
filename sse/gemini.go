package sse

import "github.com/loopguard/loopguard/internal/wireapi"

// codeAssistAnswer is the member Code Assist wraps each chunk in, as the
// registry declares it.
var codeAssistAnswer = wireapi.Lookup(wireapi.CodeAssist).AnswerWrap

// geminiCall is one functionCall part of a Gemini stream: each comes
// whole, in one chunk.
type geminiCall struct{ name, args []byte }

// GeminiAccumulator folds the chunks of a streamed Gemini answer
// (streamGenerateContent: the data of each SSE event with alt=sse, or each
// element of the streamed JSON array without it), each a
// GenerateContentResponse, or Code Assist's {"response": {...}} around
// one: candidate 0's text and thought text, its functionCall parts,
// finishReason, usageMetadata, modelVersion and responseId. A
// non-streamed answer is one such chunk.
//
// The zero value is ready to use. Once the first chunks have sized its
// buffers, adding one does not allocate, so an accumulator can be Reset
// and pooled. It is not safe for concurrent use.
type GeminiAccumulator struct {
	model, id, finish []byte
	// text and reasoning are the last chunk's; all is every chunk's text.
	text, reasoning, all []byte
	calls                []geminiCall
	usage                Usage
	hasUsage, wrapped    bool
	errRaw               []byte
}

// Reset empties a, keeping its buffers for reuse.
func (a *GeminiAccumulator) Reset() {
	*a = GeminiAccumulator{model: a.model[:0], id: a.id[:0], finish: a.finish[:0], text: a.text[:0],
		reasoning: a.reasoning[:0], all: a.all[:0], calls: a.calls[:0], errRaw: a.errRaw[:0]}
}

// Add folds one chunk into a and returns what it added: its text, its
// thought text (Reasoning), the position of the function call it carried
// (ToolCallStarted and ToolCallDone: a call comes whole; the first, when
// one chunk carries several), and Done when candidate 0 finished. Empty
// data adds nothing; an {"error": ...} chunk returns ErrUpstream with the
// payload kept (see ErrorRaw); data that is not a JSON object returns
// ErrInvalidChunk and changes nothing. Add never keeps a reference to data;
// the Update's slices alias a's buffers until the next Add.
func (a *GeminiAccumulator) Add(data []byte) (Update, error) {
	u := Update{ToolCallDone: -1, ToolCallStarted: -1}
	s, err := objectView(data)
	if s == "" {
		return u, err
	}
	a.text, a.reasoning = a.text[:0], a.reasoning[:0]
	it := newObjIter(s)
	for it.next() {
		switch it.key {
		case codeAssistAnswer:
			if isObject(it.val) {
				a.wrapped = true
				a.addResponse(it.val, &u)
			}
		case "error":
			a.errRaw = append(a.errRaw[:0], data...)
			return u, ErrUpstream
		default:
			a.member(it.key, it.val, &u)
		}
	}
	u.Text, u.Reasoning = a.text, a.reasoning
	return u, nil
}

// addResponse folds a GenerateContentResponse object.
func (a *GeminiAccumulator) addResponse(raw string, u *Update) {
	it := newObjIter(raw)
	for it.next() {
		a.member(it.key, it.val, u)
	}
}

// member folds one member of a GenerateContentResponse.
func (a *GeminiAccumulator) member(key, val string, u *Update) {
	switch key {
	case "candidates":
		cs := newArrIter(val)
		if cs.next() { // candidate 0: agents ask for one
			a.candidate(cs.val, u)
		}
	case "usageMetadata":
		a.addUsage(val)
	case "modelVersion":
		a.model = appendString(a.model[:0], val)
	case "responseId":
		a.id = appendString(a.id[:0], val)
	}
}

func (a *GeminiAccumulator) candidate(raw string, u *Update) {
	it := newObjIter(raw)
	for it.next() {
		switch it.key {
		case "content":
			c := newObjIter(it.val)
			for c.next() {
				if c.key == "parts" {
					a.parts(c.val, u)
				}
			}
		case "finishReason":
			if isString(it.val) {
				a.finish = appendString(a.finish[:0], it.val)
				u.Done = true
			}
		}
	}
}

func (a *GeminiAccumulator) parts(raw string, u *Update) {
	ps := newArrIter(raw)
	for ps.next() {
		var text, call string
		thought := false
		p := newObjIter(ps.val)
		for p.next() {
			switch p.key {
			case "text":
				text = p.val
			case "thought":
				thought = p.val == "true"
			case "functionCall":
				call = p.val
			}
		}
		switch {
		case call != "" && isObject(call):
			a.addCall(call, u)
		case thought:
			a.reasoning = appendString(a.reasoning, text)
		default:
			n := len(a.text)
			a.text = appendString(a.text, text)
			a.all = append(a.all, a.text[n:]...)
		}
	}
}

func (a *GeminiAccumulator) addCall(raw string, u *Update) {
	if len(a.calls) < cap(a.calls) {
		a.calls = a.calls[:len(a.calls)+1] // the call's buffers are reused
	} else {
		a.calls = append(a.calls, geminiCall{})
	}
	c := &a.calls[len(a.calls)-1]
	c.name, c.args = c.name[:0], c.args[:0]
	it := newObjIter(raw)
	for it.next() {
		switch it.key {
		case "name":
			c.name = appendString(c.name, it.val)
		case "args":
			c.args = append(c.args, it.val...)
		}
	}
	if len(c.args) == 0 {
		c.args = append(c.args, "{}"...)
	}
	if u.ToolCallStarted < 0 {
		u.ToolCallStarted = len(a.calls) - 1
		u.ToolCallDone = len(a.calls) - 1
	}
}

// addUsage reads usageMetadata: each chunk reports the counts so far.
// Thought tokens are output the model generated, as chat's reasoning
// tokens count among completion tokens.
func (a *GeminiAccumulator) addUsage(raw string) {
	var prompt, candidates, thoughts, total int
	it := newObjIter(raw)
	for it.next() {
		n, ok := parseInt(it.val)
		if !ok {
			continue
		}
		switch it.key {
		case "promptTokenCount":
			prompt = n
		case "candidatesTokenCount":
			candidates = n
		case "thoughtsTokenCount":
			thoughts = n
		case "totalTokenCount":
			total = n
		}
	}
	a.usage = Usage{PromptTokens: prompt, CompletionTokens: candidates + thoughts, TotalTokens: total}
	a.hasUsage = true
}

// ToolCallBytes returns the name and arguments (a JSON object) of the
// function call at position pos. The slices alias a's buffers.
func (a *GeminiAccumulator) ToolCallBytes(pos int) (name, args []byte, ok bool) {
	if pos < 0 || pos >= len(a.calls) {
		return nil, nil, false
	}
	return a.calls[pos].name, a.calls[pos].args, true
}

// Text returns the answer's text so far, thoughts left out.
func (a *GeminiAccumulator) Text() string { return string(a.all) }

// Model returns the modelVersion the stream named, "" before it did.
func (a *GeminiAccumulator) Model() string { return string(a.model) }

// ID returns the responseId, "" before the stream named it.
func (a *GeminiAccumulator) ID() string { return string(a.id) }

// FinishReason returns candidate 0's finishReason, "" before it finished.
func (a *GeminiAccumulator) FinishReason() string { return string(a.finish) }

// Usage returns the last token counts reported, ok false if none was.
func (a *GeminiAccumulator) Usage() (Usage, bool) { return a.usage, a.hasUsage }

// Wrapped reports whether the chunks came under "response", as Code
// Assist sends them.
func (a *GeminiAccumulator) Wrapped() bool { return a.wrapped }

// ErrorRaw returns the data of the error chunk that made Add return
// ErrUpstream, nil if none did.
func (a *GeminiAccumulator) ErrorRaw() []byte {
	if len(a.errRaw) == 0 {
		return nil
	}
	return a.errRaw
}
