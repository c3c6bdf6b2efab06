package fakellm

import (
	"net/http"
	"strconv"
	"time"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// OllamaAnswer is one scripted answer of Ollama's own API (POST /api/chat
// or /api/generate). Its zero value is a "stop" answer with empty text.
type OllamaAnswer struct {
	// Model is the model name; empty means the request's "model", or
	// DefaultModel.
	Model string
	// Text is the content (/api/chat's message.content, /api/generate's
	// response), streamed ChunkSize bytes a line.
	Text string
	// Calls are tool calls (/api/chat only), each whole in one line as
	// Ollama sends them, with its arguments as a JSON object ("{}" when
	// empty) and an id "call_" and 8 characters when ID is empty.
	Calls []ToolCall
	// DoneReason is the final line's done_reason; empty means "stop".
	DoneReason string
	// ChunkSize is the number of text bytes a line; zero means
	// DefaultChunkSize.
	ChunkSize int
	// Delay is the pause before each streamed line after the first.
	Delay time.Duration
	// NeverEnd repeats the text lines (or "tick ") NeverEndEvents times and
	// never sends the final line.
	NeverEnd bool
	// Status, when >= 400, answers {"error": Error} with that status.
	Status int
	Error  string
}

// OllamaRule answers every POST to a path ending in /api/chat or
// /api/generate with the answer answer builds from the request, streamed
// as NDJSON unless the request says "stream": false, as Ollama does.
func OllamaRule(answer func(*Request) OllamaAnswer) Rule {
	return Rule{
		Match: func(r *Request) bool {
			api := r.API()
			return r.Method == http.MethodPost && (api == wireapi.Ollama || api == wireapi.OllamaGenerate)
		},
		Respond: func(r *Request) Response {
			a := answer(r)
			stream := gjson.GetBytes(r.Body, "stream")
			return a.Render(!stream.Exists() || stream.Bool(), r.API() == wireapi.OllamaGenerate, r.Model)
		},
	}
}

// createdAt is every line's created_at: fixed, so that rendered bytes are
// reproducible.
var createdAt = time.Unix(DefaultCreated, 0).UTC().Format(time.RFC3339Nano)

// Render returns the Response that sends a as Ollama would: one object, or
// NDJSON lines (RawEvents) ending with "done": true and the counts.
// generate renders /api/generate's shape ("response" in place of a
// message).
func (a *OllamaAnswer) Render(stream, generate bool, model string) Response {
	if a.Model != "" {
		model = a.Model
	}
	if model == "" {
		model = DefaultModel
	}
	h := http.Header{}
	if a.Status >= 400 {
		h.Set("Content-Type", "application/json; charset=utf-8")
		return Response{Status: a.Status, Header: h, Raw: append(appendString([]byte(`{"error":`), a.Error), '}')}
	}
	line := func(text string, calls []ToolCall, final bool) []byte {
		b := append([]byte(`{"model":`), appendString(nil, model)...)
		b = append(b, `,"created_at":`...)
		b = appendString(b, createdAt)
		if generate {
			b = append(b, `,"response":`...)
			b = appendString(b, text)
		} else {
			b = append(b, `,"message":{"role":"assistant","content":`...)
			b = appendString(b, text)
			if len(calls) > 0 {
				b = append(b, `,"tool_calls":[`...)
				for i, c := range calls {
					if i > 0 {
						b = append(b, ',')
					}
					id := c.ID
					if id == "" {
						id = "call_" + strconv.FormatInt(int64(10000000+i), 36)
					}
					args := c.Arguments
					if args == "" {
						args = "{}"
					}
					b = append(b, `{"id":`...)
					b = appendString(b, id)
					b = append(b, `,"function":{"index":`...)
					b = strconv.AppendInt(b, int64(i), 10)
					b = append(b, `,"name":`...)
					b = appendString(b, c.Name)
					b = append(b, `,"arguments":`...)
					b = append(b, args...)
					b = append(b, "}}"...)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		if !final {
			return append(b, `,"done":false}`...)
		}
		reason := a.DoneReason
		if reason == "" {
			reason = "stop"
		}
		b = append(b, `,"done":true,"done_reason":`...)
		b = appendString(b, reason)
		n := (len(a.Text) + 3) / 4
		return append(b, `,"total_duration":1000000,"load_duration":1000,"prompt_eval_count":10,"prompt_eval_duration":1000,"eval_count":`+
			strconv.Itoa(n)+`,"eval_duration":1000}`...)
	}
	if !stream {
		// Not streamed: one object with the whole message and the counts.
		h.Set("Content-Type", "application/json; charset=utf-8")
		return Response{Status: http.StatusOK, Header: h, Raw: line(a.Text, a.Calls, true), Delay: a.Delay}
	}
	h.Set("Content-Type", "application/x-ndjson")
	var out [][]byte
	nl := func(b []byte) []byte { return append(b, '\n') }
	deltas := splitText(a.Text, a.ChunkSize)
	if a.NeverEnd {
		if len(deltas) == 0 {
			deltas = []string{neverEndTick}
		}
		for len(out) < NeverEndEvents {
			for _, d := range deltas {
				out = append(out, nl(line(d, nil, false)))
			}
		}
		delay := max(a.Delay, neverEndMinDelay)
		return Response{Status: http.StatusOK, Header: h, RawEvents: out, Delay: delay}
	}
	for _, d := range deltas {
		out = append(out, nl(line(d, nil, false)))
	}
	if len(a.Calls) > 0 && !generate {
		out = append(out, nl(line("", a.Calls, false)))
	}
	out = append(out, nl(line("", nil, true)))
	return Response{Status: http.StatusOK, Header: h, RawEvents: out, Delay: a.Delay}
}
