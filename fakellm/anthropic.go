package fakellm

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// AnthropicAnswer is one scripted answer of the Anthropic Messages API
// (POST /v1/messages). Its zero value is an end_turn answer with one empty
// text block.
type AnthropicAnswer struct {
	// ID is the message id; empty means "msg_01" and 22 alphanumerics,
	// deterministic per exchange.
	ID string
	// Model is the model name; empty means the request's "model", or
	// DefaultModel.
	Model string

	// Text is the text block's content, streamed in ChunkSize-byte
	// text_delta events. An answer without Calls always has a text block.
	Text string
	// Calls are tool_use blocks after the text; Arguments is the JSON
	// object of the tool's input ("{}" when empty), streamed as
	// input_json_delta fragments after an empty first one. A call's ID is
	// the block id ("toolu_01…" generated when empty).
	Calls []ToolCall
	// StopReason is the stop_reason; empty means "tool_use" when Calls is
	// set, else "end_turn".
	StopReason string
	// Usage overrides the token counts; zero means counts derived from the
	// byte lengths of the request and the answer.
	Usage Usage

	// ChunkSize is the number of bytes per text or input delta; zero means
	// DefaultChunkSize.
	ChunkSize int
	// Delay is the pause before each streamed event after the first (and
	// before a non-streamed body).
	Delay time.Duration
	// NeverEnd repeats the text deltas (or "tick ") NeverEndEvents times and
	// never stops the message, paced at least neverEndMinDelay apart.
	NeverEnd bool

	// Error, when set, is the message of an `event: error` sent after
	// ErrorAfter events (the stream then stops), or, for a non-streamed
	// request, of an error body with Status (default 529, overloaded).
	Error      string
	ErrorAfter int
	// Status is the HTTP status; zero means 200. A status >= 400 answers
	// with the error body, stream or not.
	Status int
}

// AnthropicRule answers every POST to a path ending in /messages with the
// answer answer builds from the request, rendered for the request's
// "stream" and "model". Ids are deterministic per rule and request order.
func AnthropicRule(answer func(*Request) AnthropicAnswer) Rule {
	var n atomic.Uint64
	return Rule{
		Match: func(r *Request) bool { return r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/messages") },
		Respond: func(r *Request) Response {
			a := answer(r)
			return a.Render(r.Stream, r.Model, len(r.Body), n.Add(1))
		},
	}
}

// Render returns the Response that sends a as api.anthropic.com would: a
// compact message object, or its event stream (RawEvents). model is the
// request's model, reqLen its body length (for the derived usage) and seq
// seeds the generated ids.
func (a *AnthropicAnswer) Render(stream bool, model string, reqLen int, seq uint64) Response {
	rn := newAnthropicRenderer(a, model, reqLen, seq)
	h := http.Header{}
	h.Set("Request-Id", "req_011C"+rn.rand(20, alnum))
	h.Set("Anthropic-Organization-Id", "00000000-0000-4000-8000-000000000000")
	if a.Status >= 400 || (a.Error != "" && !stream) {
		status := a.Status
		if status == 0 {
			status = 529
		}
		msg := a.Error
		if msg == "" {
			msg = http.StatusText(status)
		}
		h.Set("Content-Type", "application/json")
		return Response{Status: status, Header: h, Raw: rn.errorBody(status, msg), Delay: a.Delay}
	}
	status := a.Status
	if status == 0 {
		status = http.StatusOK
	}
	if !stream {
		h.Set("Content-Type", "application/json")
		return Response{Status: status, Header: h, Raw: rn.message(), Delay: a.Delay}
	}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	delay := a.Delay
	if a.NeverEnd && delay < neverEndMinDelay {
		delay = neverEndMinDelay
	}
	return Response{Status: status, Header: h, RawEvents: rn.stream(), Delay: delay}
}

type anthropicRenderer struct {
	a         *AnthropicAnswer
	rng       *rand.Rand
	id, model string
	usage     Usage
	text      bool
	calls     []ToolCall
}

func newAnthropicRenderer(a *AnthropicAnswer, model string, reqLen int, seq uint64) *anthropicRenderer {
	rn := &anthropicRenderer{a: a, rng: rand.New(rand.NewPCG(seq, 0x616e_7468))}
	rn.id = a.ID
	if rn.id == "" {
		rn.id = "msg_01" + rn.rand(22, alnum)
	}
	rn.model = a.Model
	if rn.model == "" {
		rn.model = model
	}
	if rn.model == "" {
		rn.model = DefaultModel
	}
	rn.text = a.Text != "" || len(a.Calls) == 0 || a.NeverEnd
	if !a.NeverEnd {
		for _, c := range a.Calls {
			if c.ID == "" {
				c.ID = "toolu_01" + rn.rand(22, alnum)
			}
			if c.Arguments == "" {
				c.Arguments = "{}"
			}
			rn.calls = append(rn.calls, c)
		}
	}
	rn.usage = a.Usage
	if rn.usage == (Usage{}) {
		n := len(a.Text)
		for _, c := range a.Calls {
			n += len(c.Name) + len(c.Arguments)
		}
		rn.usage = Usage{PromptTokens: reqLen/4 + 1, CompletionTokens: n/4 + 1}
	}
	return rn
}

func (rn *anthropicRenderer) rand(n int, alphabet string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rn.rng.IntN(len(alphabet))]
	}
	return string(b)
}

func (rn *anthropicRenderer) stopReason() string {
	switch {
	case rn.a.StopReason != "":
		return rn.a.StopReason
	case len(rn.calls) > 0:
		return "tool_use"
	}
	return "end_turn"
}

// head appends the message object's members up to its content array.
func (rn *anthropicRenderer) head(b []byte) []byte {
	b = appendString(append(b, `{"id":`...), rn.id)
	return append(b, `,"type":"message","role":"assistant","content":[`...)
}

// tail appends the members after the content array; stop "" means null
// (message_start).
func (rn *anthropicRenderer) tail(b []byte, stop string, outputTokens int) []byte {
	b = appendString(append(b, `],"model":`...), rn.model)
	b = append(b, `,"stop_reason":`...)
	if stop == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, stop)
	}
	b = append(b, `,"stop_sequence":null,"usage":{"input_tokens":`+strconv.Itoa(rn.usage.PromptTokens)+
		`,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":`+strconv.Itoa(outputTokens)+`}}`...)
	return b
}

// input returns a call's input as JSON to embed: its arguments when they
// are a JSON object, else {} (the API never sends anything else).
func input(c ToolCall) string {
	s := strings.TrimSpace(c.Arguments)
	if strings.HasPrefix(s, "{") && json.Valid([]byte(s)) {
		return s
	}
	return "{}"
}

// message renders the non-streamed message.
func (rn *anthropicRenderer) message() []byte {
	b := rn.head(make([]byte, 0, 512+len(rn.a.Text)))
	n := 0
	if rn.text {
		b = appendString(append(b, `{"type":"text","text":`...), rn.a.Text)
		b = append(b, '}')
		n++
	}
	for _, c := range rn.calls {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = rn.toolUse(b, c, input(c))
	}
	return rn.tail(b, rn.stopReason(), rn.usage.CompletionTokens)
}

func (rn *anthropicRenderer) toolUse(b []byte, c ToolCall, in string) []byte {
	b = appendString(append(b, `{"type":"tool_use","id":`...), c.ID)
	b = appendString(append(b, `,"name":`...), c.Name)
	return append(b, `,"input":`+in+`}`...)
}

// frame renders one `event:` + `data:` frame.
func anthropicFrame(typ string, payload []byte) []byte {
	b := make([]byte, 0, len(typ)+len(payload)+16)
	b = append(b, "event: "+typ+"\ndata: "...)
	b = append(b, payload...)
	return append(b, "\n\n"...)
}

// stream renders the event sequence (with the error in place when the
// answer has one).
func (rn *anthropicRenderer) stream() [][]byte {
	var out [][]byte
	add := func(typ string, payload []byte) bool {
		if rn.a.Error != "" && len(out) == rn.a.ErrorAfter {
			out = append(out, rn.errorEvent())
			return false
		}
		out = append(out, anthropicFrame(typ, payload))
		return true
	}
	start := rn.tail(rn.head([]byte(`{"type":"message_start","message":`)), "", 1)
	if !add("message_start", append(start, '}')) {
		return out
	}
	size := rn.a.ChunkSize
	blockStop := func(i int) bool {
		return add("content_block_stop", []byte(`{"type":"content_block_stop","index":`+strconv.Itoa(i)+`}`))
	}
	delta := func(i int, typ, key, frag string) []byte {
		b := []byte(`{"type":"content_block_delta","index":` + strconv.Itoa(i) + `,"delta":{"type":"` + typ + `","` + key + `":`)
		return append(appendString(b, frag), "}}"...)
	}
	idx := 0
	pinged := false
	ping := func() bool {
		// The API sends one ping after the first block opens.
		if pinged {
			return true
		}
		pinged = true
		return add("ping", []byte(`{"type": "ping"}`))
	}
	if rn.text {
		if !add("content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)) || !ping() {
			return out
		}
		deltas := splitText(rn.a.Text, size)
		if rn.a.NeverEnd {
			if len(deltas) == 0 {
				deltas = []string{neverEndTick}
			}
			for len(out) < NeverEndEvents {
				for _, d := range deltas {
					out = append(out, anthropicFrame("content_block_delta", delta(0, "text_delta", "text", d)))
				}
			}
			return out
		}
		for _, d := range deltas {
			if !add("content_block_delta", delta(0, "text_delta", "text", d)) {
				return out
			}
		}
		if !blockStop(0) {
			return out
		}
		idx++
	}
	for _, c := range rn.calls {
		b := []byte(`{"type":"content_block_start","index":` + strconv.Itoa(idx) + `,"content_block":`)
		if !add("content_block_start", append(rn.toolUse(b, c, "{}"), '}')) || !ping() {
			return out
		}
		frags := append([]string{""}, splitText(input(c), size)...)
		for _, f := range frags {
			if !add("content_block_delta", delta(idx, "input_json_delta", "partial_json", f)) {
				return out
			}
		}
		if !blockStop(idx) {
			return out
		}
		idx++
	}
	md := appendString([]byte(`{"type":"message_delta","delta":{"stop_reason":`), rn.stopReason())
	md = append(md, `,"stop_sequence":null},"usage":{"output_tokens":`+strconv.Itoa(rn.usage.CompletionTokens)+`}}`...)
	if !add("message_delta", md) || !add("message_stop", []byte(`{"type":"message_stop"}`)) {
		return out
	}
	if rn.a.Error != "" && rn.a.ErrorAfter >= len(out) {
		// Past the end: the error takes message_stop's place.
		out[len(out)-1] = rn.errorEvent()
	}
	return out
}

// errorEvent is the mid-stream error as the API sends it (Python's
// json.dumps separators, as in Anthropic's streaming documentation).
func (rn *anthropicRenderer) errorEvent() []byte {
	b := appendString([]byte(`{"type": "error", "error": {"type": "overloaded_error", "message": `), rn.a.Error)
	return anthropicFrame("error", append(b, "}}"...))
}

// errorBody is the API's error JSON for status.
func (rn *anthropicRenderer) errorBody(status int, msg string) []byte {
	typ := "api_error"
	switch status {
	case 400:
		typ = "invalid_request_error"
	case 401:
		typ = "authentication_error"
	case 403:
		typ = "permission_error"
	case 404:
		typ = "not_found_error"
	case 413:
		typ = "request_too_large"
	case 429:
		typ = "rate_limit_error"
	case 529:
		typ = "overloaded_error"
	}
	b := appendString([]byte(`{"type":"error","error":{"type":"`+typ+`","message":`), msg)
	b = append(b, `},"request_id":"req_011C`...)
	b = append(b, rn.rand(20, alnum)...)
	return append(b, `"}`...)
}
