package proxy

import (
	"strings"
	"sync"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
)

// Gemini's API (generateContent and streamGenerateContent, the model in
// the path) is what Gemini CLI with an API key and the Google GenAI SDKs
// speak; Code Assist, which Gemini CLI signed in with Google speaks, wraps
// the same requests and answers (the registry's Wrap and AnswerWrap). Every request carries the whole
// history in "contents". The path says whether a request streams, the
// query how (alt=sse: SSE events; else one JSON array sent element by
// element): each API has a variant for each, the LOOP_DETECTED answer and
// the end of a cut stream written to match.
func init() {
	registerGemini(wireapi.Gemini, false)
	registerGemini(wireapi.CodeAssist, true)
}

// registerGemini registers the variant of name that answers a request
// that does not stream, and returns it; its variant hook picks the
// streamed ones.
func registerGemini(name wireapi.Name, wrapped bool) *wireAPI {
	textPath := "candidates.0.content.parts.0.text"
	if wrapped {
		textPath = wireapi.Lookup(name).AnswerWrap + "." + textPath
	}
	var variants [3]*wireAPI // not streamed; streamed as a JSON array; as SSE
	for i := range variants {
		form := inject.GeminiForm{Stream: i > 0, SSE: i == 2, Wrapped: wrapped}
		framing := wireapi.JSONArray
		if form.SSE {
			framing = wireapi.SSE
		}
		variants[i] = &wireAPI{
			name: name,
			apply: func(in *inject.Injector, body []byte, e inject.Edit) (inject.Result, error) {
				return in.ApplyGemini(body, e, wrapped)
			},
			terminate: func(in *inject.Injector, body []byte, l inject.Loop) (inject.Response, error) {
				return in.TerminateGemini(body, l, form)
			},
			newAnswer: func() answer {
				a := geminiStreams.Get().(*geminiStream)
				a.sse = form.SSE
				return a
			},
			holdEvent: (*callHolder).itemEvent,
			cutBody:   cutGeminiBody,
			textPath:  textPath,
			framing:   framing,
		}
	}
	base := register(variants[0])
	for _, v := range variants[1:] {
		v.reg, v.streamByDefault = base.reg, true
	}
	pick := func(stream, sse bool) *wireAPI {
		switch {
		case stream && sse:
			return variants[2]
		case stream:
			return variants[1]
		}
		return variants[0]
	}
	for _, v := range variants {
		v.variant = pick
	}
	return base
}

// geminiStream is a streamed Gemini answer: chunks that each carry some of
// candidate 0's parts, every function call whole in one chunk.
type geminiStream struct {
	acc sse.GeminiAccumulator
	ups []sse.Update // what the last add returned
	// sse: the stream is SSE events (alt=sse), else one JSON array.
	sse bool
	// chunks counts the chunks added; callChunk is the chunk each call
	// came in (1 for the first), so that an end that replaces a held call
	// knows whether the array's "[" went with it.
	chunks    int
	callChunk []int
}

var geminiStreams = sync.Pool{New: func() any { return new(geminiStream) }}

// add: a call arrives whole, so it starts and completes in one chunk; a
// chunk with several calls returns one update a call, so that each is
// compared with those before it.
func (a *geminiStream) add(data []byte) ([]sse.Update, error) {
	before := len(a.callChunk)
	u, err := a.acc.Add(data)
	if err != nil {
		return nil, err
	}
	a.chunks++
	u.ToolCallStarted, u.ToolCallDone = -1, -1
	a.ups = a.ups[:0]
	for pos := before; ; pos++ {
		if _, _, ok := a.acc.ToolCallBytes(pos); !ok {
			break
		}
		a.callChunk = append(a.callChunk, a.chunks)
		u.ToolCall = true
		u.ToolCallStarted, u.ToolCallDone = pos, pos
		a.ups = append(a.ups, u)
		u.Text, u.Reasoning = nil, nil
	}
	if len(a.ups) == 0 {
		a.ups = append(a.ups, u)
	}
	return a.ups, nil
}

func (a *geminiStream) toolCall(pos int) (name, args []byte, ok bool) {
	return a.acc.ToolCallBytes(pos)
}

func (a *geminiStream) usage() sse.Usage {
	u, _ := a.acc.Usage()
	return u
}

// appendEnd ends a cut stream with a last chunk in the stream's framing
// and wrapping: finishReason STOP (MAX_TOKENS for stream.finish_reason
// "length"), and in SSE a comment naming the rule; or with e's
// replacement, the LOOP_DETECTED answer as a text part with finishReason
// STOP, in place of a held call.
func (a *geminiStream) appendEnd(b []byte, e *ending, _ *sse.Event) ([]byte, bool) {
	u, _ := a.acc.Usage()
	c := inject.GeminiChunk{FinishReason: "STOP", PromptTokens: u.PromptTokens, OutputTokens: estimateTokens(e.bytes),
		Model: a.acc.Model(), ResponseID: a.acc.ID(), Wrapped: a.acc.Wrapped()}
	if c.Model == "" {
		c.Model = e.model
	}
	if e.replacement != "" {
		c.Text = e.replacement
		if !a.sse && e.at.index < len(a.callChunk) && a.callChunk[e.at.index] == 1 {
			// The held call came in the first element, with the array's
			// opening bracket: the answer opens it.
			b = append(b, '[')
			b = c.Append(b)
			return append(b, ']'), true
		}
		return inject.AppendGeminiEvent(b, c, a.sse), true
	}
	if strings.EqualFold(e.finishReason, "length") {
		c.FinishReason = "MAX_TOKENS"
	}
	return inject.AppendGeminiCut(b, string(e.cut.Category), c, a.sse), true
}

func (a *geminiStream) release() {
	a.acc.Reset()
	a.ups, a.callChunk, a.chunks, a.sse = a.ups[:0], a.callChunk[:0], 0, false
	geminiStreams.Put(a)
}

// cutGeminiBody cuts a degenerate non-streamed Gemini answer (Code
// Assist's under "response"): candidate 0's text parts, in order, are its
// text, thoughts left out; the answer ends with finishReason STOP
// (MAX_TOKENS for stream.finish_reason "length").
func cutGeminiBody(w *cutWatch, b []byte, finish string) []byte {
	prefix := ""
	if wrap := wireapi.Lookup(wireapi.CodeAssist).AnswerWrap; gjson.GetBytes(b, wrap).IsObject() {
		prefix = wrap + "."
	}
	reason := "STOP"
	if strings.EqualFold(finish, "length") {
		reason = "MAX_TOKENS"
	}
	return cutItemsBody(w, b, prefix+"candidates.0.content.parts", func(i int, it gjson.Result, feed textFeed) bool {
		t := it.Get("text")
		return t.Type != gjson.String || it.Get("thought").Bool() || feed(i, -1, t)
	}, func(string) jsonEdit { return jsonEdit{prefix + "candidates.0.finishReason", reason} })
}

var _ answer = (*geminiStream)(nil)
