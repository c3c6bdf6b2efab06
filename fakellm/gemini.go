package fakellm

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// GeminiAnswer is one scripted answer of Google's Gemini API
// (generateContent, streamGenerateContent) or of Code Assist, which wraps
// it. Its zero value is a STOP answer with empty text.
type GeminiAnswer struct {
	// Model is the modelVersion; empty means the model the path (Gemini)
	// or the body (Code Assist) names, or DefaultModel.
	Model string
	// Thought, when set, is a thought part sent before the text, its
	// tokens (a quarter of its bytes) the usageMetadata's
	// thoughtsTokenCount.
	Thought string
	// Text is the model content's text, streamed ChunkSize bytes a chunk.
	Text string
	// Calls are functionCall parts, all in one chunk after the text as
	// Gemini sends them, with args the JSON object Arguments ("{}" when
	// empty); a call's ID, when set, is its id.
	Calls []ToolCall
	// FinishReason is the last chunk's finishReason; empty means "STOP".
	FinishReason string
	// ChunkSize is the number of text bytes a chunk; zero means
	// DefaultChunkSize.
	ChunkSize int
	// Delay is the pause before each streamed chunk after the first.
	Delay time.Duration
	// NeverEnd repeats the text chunks (or "tick ") NeverEndEvents times
	// and never finishes.
	NeverEnd bool
	// Status, when >= 400, answers Google's error shape with Error as its
	// message.
	Status int
	Error  string
}

// GeminiRule answers every POST to a Gemini path (…/models/{model}:
// generateContent or :streamGenerateContent) or a Code Assist one
// (/v1internal:generateContent, :streamGenerateContent) with the answer
// answer builds from the request: streamed as SSE events with alt=sse, as
// one JSON array without it, wrapped under "response" for Code Assist.
func GeminiRule(answer func(*Request) GeminiAnswer) Rule {
	return Rule{
		Match: func(r *Request) bool {
			api := r.API()
			return r.Method == http.MethodPost && (api == wireapi.Gemini || api == wireapi.CodeAssist)
		},
		Respond: func(r *Request) Response {
			a := answer(r)
			route := wireapi.Match(r.Path)
			model := wireapi.Model(r.Path)
			if model == "" {
				model = gjson.GetBytes(r.Body, "model").String()
			}
			sse := strings.Contains("&"+r.RawQuery+"&", "&alt=sse&")
			return a.Render(route.Stream, sse, route.API.Name == wireapi.CodeAssist, model, len(r.Body))
		},
	}
}

// Render returns the Response that sends a as Google would: one
// GenerateContentResponse, or for a stream its chunks (RawEvents) as SSE
// events ("data: ", CRLF line ends) or as the elements of one JSON array
// sent bit by bit; wrapped puts each under "response" beside a traceId,
// as Code Assist does. reqLen sizes the prompt's token count.
func (a *GeminiAnswer) Render(stream, sse, wrapped bool, model string, reqLen int) Response {
	if a.Model != "" {
		model = a.Model
	}
	if model == "" {
		model = DefaultModel
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=UTF-8")
	if a.Status >= 400 {
		b := append([]byte(`{"error":{"code":`), strconv.Itoa(a.Status)...)
		b = append(b, `,"message":`...)
		b = appendString(b, a.Error)
		b = append(b, `,"status":"UNAVAILABLE"}}`...)
		return Response{Status: a.Status, Header: h, Raw: b}
	}
	prompt := reqLen / 4
	chunk := func(thought, text string, calls []ToolCall, final bool) []byte {
		var b []byte
		if wrapped {
			b = append(b, `{"response":`...)
		}
		b = append(b, `{"candidates":[{"content":{"role":"model","parts":[`...)
		n := 0
		part := func() {
			if n > 0 {
				b = append(b, ',')
			}
			n++
		}
		if thought != "" {
			part()
			b = append(b, `{"text":`...)
			b = appendString(b, thought)
			b = append(b, `,"thought":true}`...)
		}
		if text != "" || thought == "" && len(calls) == 0 {
			part()
			b = append(b, `{"text":`...)
			b = appendString(b, text)
			b = append(b, '}')
		}
		for _, c := range calls {
			part()
			b = append(b, `{"functionCall":{`...)
			if c.ID != "" {
				b = append(b, `"id":`...)
				b = appendString(b, c.ID)
				b = append(b, ',')
			}
			args := c.Arguments
			if args == "" {
				args = "{}"
			}
			b = append(b, `"name":`...)
			b = appendString(b, c.Name)
			b = append(b, `,"args":`...)
			b = append(b, args...)
			b = append(b, "}}"...)
		}
		b = append(b, `]}`...)
		if final {
			reason := a.FinishReason
			if reason == "" {
				reason = "STOP"
			}
			b = append(b, `,"finishReason":`...)
			b = appendString(b, reason)
		}
		b = append(b, `,"index":0}],"usageMetadata":{"promptTokenCount":`...)
		b = strconv.AppendInt(b, int64(prompt), 10)
		if final {
			out, thoughts := (len(a.Text)+3)/4, (len(a.Thought)+3)/4
			b = append(b, `,"candidatesTokenCount":`...)
			b = strconv.AppendInt(b, int64(out), 10)
			if thoughts > 0 {
				// Thinking models count thoughts apart from the candidates.
				b = append(b, `,"thoughtsTokenCount":`...)
				b = strconv.AppendInt(b, int64(thoughts), 10)
			}
			b = append(b, `,"totalTokenCount":`...)
			b = strconv.AppendInt(b, int64(prompt+out+thoughts), 10)
		} else {
			b = append(b, `,"totalTokenCount":`...)
			b = strconv.AppendInt(b, int64(prompt), 10)
		}
		b = append(b, `},"modelVersion":`...)
		b = appendString(b, model)
		b = append(b, `,"responseId":"fakellm-gemini-1"}`...)
		if wrapped {
			b = append(b, `,"traceId":"fakellm-trace-1"}`...)
		}
		return b
	}
	if !stream {
		return Response{Status: http.StatusOK, Header: h, Raw: chunk(a.Thought, a.Text, a.Calls, true), Delay: a.Delay}
	}
	var out [][]byte
	frame := func(b []byte) []byte {
		switch {
		case sse:
			return append(append([]byte("data: "), b...), "\r\n\r\n"...)
		case len(out) == 0:
			return append([]byte("["), b...)
		}
		return append([]byte("\n,\r\n"), b...)
	}
	if sse {
		h.Set("Content-Type", "text/event-stream")
	}
	deltas := splitText(a.Text, a.ChunkSize)
	if a.NeverEnd {
		if len(deltas) == 0 {
			deltas = []string{neverEndTick}
		}
		for len(out) < NeverEndEvents {
			for _, d := range deltas {
				out = append(out, frame(chunk("", d, nil, false)))
			}
		}
		return Response{Status: http.StatusOK, Header: h, RawEvents: out, Delay: max(a.Delay, neverEndMinDelay)}
	}
	if a.Thought != "" {
		out = append(out, frame(chunk(a.Thought, "", nil, false)))
	}
	for i, d := range deltas {
		last := i == len(deltas)-1 && len(a.Calls) == 0
		out = append(out, frame(chunk("", d, nil, last)))
	}
	if len(a.Calls) > 0 || len(deltas) == 0 {
		out = append(out, frame(chunk("", "", a.Calls, true)))
	}
	if !sse {
		out = append(out, []byte("\n]"))
	}
	return Response{Status: http.StatusOK, Header: h, RawEvents: out, Delay: a.Delay}
}
