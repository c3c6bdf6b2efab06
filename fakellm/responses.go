package fakellm

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// NeverEndEvents bounds a NeverEnd stream of the Responses and Anthropic
// dialects. Those answers are replayed as RawEvents, which the Server sends
// once, so "never" is this many repeated deltas: at the minimum pace of
// neverEndMinDelay that is a minute, far longer than any test waits for a
// cut, and the Exchange still reports the events left unsent.
const NeverEndEvents = 30000

// ResponsesAnswer is one scripted answer of the OpenAI Responses API
// (POST /v1/responses). Its zero value is a completed answer with an empty
// output message.
type ResponsesAnswer struct {
	// ID is the response id; empty means "resp_" and 50 hex digits,
	// deterministic per exchange.
	ID string
	// Model is the model name; empty means the request's "model", or
	// DefaultModel.
	Model string
	// CreatedAt is the "created_at" Unix time; zero means DefaultCreated.
	CreatedAt int64

	// Text is the output message's text, streamed in ChunkSize-byte
	// output_text deltas. An answer without Calls always has a message.
	Text string
	// Calls are function calls, output after the message; a call's ID is its
	// call_id ("call_…" generated when empty).
	Calls []ToolCall
	// Usage overrides the token counts; zero means counts derived from the
	// byte lengths of the request and the answer.
	Usage Usage

	// ChunkSize is the number of bytes per text or argument delta; zero
	// means DefaultChunkSize.
	ChunkSize int
	// Delay is the pause before each streamed event after the first (and
	// before a non-streamed body).
	Delay time.Duration
	// NeverEnd repeats the text deltas (or "tick ") NeverEndEvents times and
	// never completes the response, paced at least neverEndMinDelay apart.
	NeverEnd bool

	// Error, when set, is the message of an `event: error` sent after
	// ErrorAfter events (the stream then stops), or, for a non-streamed
	// request, of an error body with Status (default 500).
	Error      string
	ErrorAfter int
	// Status is the HTTP status; zero means 200. A status >= 400 answers
	// with the error body, stream or not.
	Status int
}

// ResponsesRule answers every POST to a path ending in /responses with the
// answer answer builds from the request, rendered for the request's
// "stream" and "model". Ids are deterministic per rule and request order.
func ResponsesRule(answer func(*Request) ResponsesAnswer) Rule {
	var n atomic.Uint64
	return Rule{
		Match: func(r *Request) bool { return r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/responses") },
		Respond: func(r *Request) Response {
			a := answer(r)
			return a.Render(r.Stream, r.Model, len(r.Body), n.Add(1))
		},
	}
}

// Render returns the Response that sends a as api.openai.com would: a
// pretty-printed response object, or its stream of response.* events
// (RawEvents). model is the request's model, reqLen its body length (for
// the derived usage) and seq seeds the generated ids.
func (a *ResponsesAnswer) Render(stream bool, model string, reqLen int, seq uint64) Response {
	rn := newResponsesRenderer(a, model, reqLen, seq)
	h := http.Header{}
	h.Set("Openai-Processing-Ms", "42")
	h.Set("Openai-Version", "2020-10-01")
	h.Set("X-Request-Id", "req_"+rn.rand(32, hexDigits))
	if a.Status >= 400 || (a.Error != "" && !stream) {
		status := a.Status
		if status == 0 {
			status = http.StatusInternalServerError
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
		b := rn.responseObject(nil, "completed", true, true)
		return Response{Status: status, Header: h, Raw: indentOpenAI(b), Delay: a.Delay}
	}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	events := rn.stream()
	delay := a.Delay
	if a.NeverEnd && delay < neverEndMinDelay {
		delay = neverEndMinDelay
	}
	return Response{Status: status, Header: h, RawEvents: events, Delay: delay}
}

// responsesItem is one output item with its generated ids.
type responsesItem struct {
	id   string
	call *ToolCall // nil: the output message
}

type responsesRenderer struct {
	a         *ResponsesAnswer
	rng       *rand.Rand
	id, model string
	created   int64
	usage     Usage
	items     []responsesItem
	seq       int
}

func newResponsesRenderer(a *ResponsesAnswer, model string, reqLen int, seq uint64) *responsesRenderer {
	rn := &responsesRenderer{a: a, rng: rand.New(rand.NewPCG(seq, 0x7265_7370))}
	rn.id = a.ID
	if rn.id == "" {
		rn.id = "resp_" + rn.rand(50, hexDigits)
	}
	rn.model = a.Model
	if rn.model == "" {
		rn.model = model
	}
	if rn.model == "" {
		rn.model = DefaultModel
	}
	rn.created = a.CreatedAt
	if rn.created == 0 {
		rn.created = DefaultCreated
	}
	if a.Text != "" || len(a.Calls) == 0 || a.NeverEnd {
		rn.items = append(rn.items, responsesItem{id: "msg_" + rn.rand(50, hexDigits)})
	}
	if !a.NeverEnd {
		for i := range a.Calls {
			c := a.Calls[i]
			if c.ID == "" {
				c.ID = "call_" + rn.rand(24, alnum)
			}
			rn.items = append(rn.items, responsesItem{id: "fc_" + rn.rand(50, hexDigits), call: &c})
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

func (rn *responsesRenderer) rand(n int, alphabet string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rn.rng.IntN(len(alphabet))]
	}
	return string(b)
}

// responseObject appends the response object in the API's key order;
// output and usage are left empty (and null) while it is in progress.
func (rn *responsesRenderer) responseObject(b []byte, status string, output, usage bool) []byte {
	b = appendString(append(b, `{"id":`...), rn.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = appendInt(b, rn.created)
	b = appendString(append(b, `,"status":`...), status)
	b = append(b, `,"background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":`...)
	b = appendString(b, rn.model)
	b = append(b, `,"output":[`...)
	if output {
		for i := range rn.items {
			if i > 0 {
				b = append(b, ',')
			}
			b = rn.item(b, i, "completed")
		}
	}
	b = append(b, `],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":`...)
	if usage {
		p, c := strconv.Itoa(rn.usage.PromptTokens), strconv.Itoa(rn.usage.CompletionTokens)
		t := strconv.Itoa(rn.usage.PromptTokens + rn.usage.CompletionTokens)
		b = append(b, `{"input_tokens":`+p+`,"input_tokens_details":{"cached_tokens":0},"output_tokens":`+c+
			`,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`+t+`}`...)
	} else {
		b = append(b, "null"...)
	}
	return append(b, `,"user":null,"metadata":{}}`...)
}

// item appends output item i; status "in_progress" renders it as
// output_item.added announces it (no content, empty arguments).
func (rn *responsesRenderer) item(b []byte, i int, status string) []byte {
	it := rn.items[i]
	done := status == "completed"
	if it.call == nil {
		b = appendString(append(b, `{"id":`...), it.id)
		b = appendString(append(b, `,"type":"message","status":`...), status)
		b = append(b, `,"content":[`...)
		if done {
			b = rn.textPart(b, rn.a.Text)
		}
		return append(b, `],"role":"assistant"}`...)
	}
	args := ""
	if done {
		args = it.call.Arguments
	}
	b = appendString(append(b, `{"id":`...), it.id)
	b = appendString(append(b, `,"type":"function_call","status":`...), status)
	b = appendString(append(b, `,"arguments":`...), args)
	b = appendString(append(b, `,"call_id":`...), it.call.ID)
	b = appendString(append(b, `,"name":`...), it.call.Name)
	return append(b, '}')
}

func (rn *responsesRenderer) textPart(b []byte, text string) []byte {
	b = append(b, `{"type":"output_text","annotations":[],"logprobs":[],"text":`...)
	return append(appendString(b, text), '}')
}

// event renders one `event:` + `data:` frame whose payload starts with
// type and sequence_number; body appends the remaining members.
func (rn *responsesRenderer) event(typ string, body func(b []byte) []byte) []byte {
	b := make([]byte, 0, 256)
	b = append(b, "event: "+typ+"\ndata: "...)
	b = append(b, `{"type":"`+typ+`","sequence_number":`...)
	b = strconv.AppendInt(b, int64(rn.seq), 10)
	rn.seq++
	if body != nil {
		b = body(b)
	}
	return append(b, "}\n\n"...)
}

// itemRef appends the item_id/output_index members of item i.
func (rn *responsesRenderer) itemRef(b []byte, i int) []byte {
	b = appendString(append(b, `,"item_id":`...), rn.items[i].id)
	return append(b, `,"output_index":`+strconv.Itoa(i)...)
}

func (rn *responsesRenderer) obfuscation(b []byte) []byte {
	return append(append(append(b, `,"obfuscation":"`...), rn.rand(1+rn.rng.IntN(12), alnum)...), '"')
}

// stream renders the whole event sequence (with the error in place when
// the answer has one).
func (rn *responsesRenderer) stream() [][]byte {
	var out [][]byte
	add := func(typ string, body func(b []byte) []byte) bool {
		if rn.a.Error != "" && len(out) == rn.a.ErrorAfter {
			out = append(out, rn.errorEvent())
			return false
		}
		out = append(out, rn.event(typ, body))
		return true
	}
	inProgress := func(b []byte) []byte {
		return rn.responseObject(append(b, `,"response":`...), "in_progress", false, false)
	}
	if !add("response.created", inProgress) || !add("response.in_progress", inProgress) {
		return out
	}
	size := rn.a.ChunkSize
	for i, it := range rn.items {
		if !add("response.output_item.added", func(b []byte) []byte {
			return rn.item(append(b, `,"output_index":`+strconv.Itoa(i)+`,"item":`...), i, "in_progress")
		}) {
			return out
		}
		if it.call == nil {
			part := func(b []byte, text string) []byte {
				b = append(rn.itemRef(b, i), `,"content_index":0,"part":`...)
				return rn.textPart(b, text)
			}
			if !add("response.content_part.added", func(b []byte) []byte { return part(b, "") }) {
				return out
			}
			deltas := splitText(rn.a.Text, size)
			if rn.a.NeverEnd {
				if len(deltas) == 0 {
					deltas = []string{neverEndTick}
				}
				for len(out) < NeverEndEvents {
					for _, d := range deltas {
						out = append(out, rn.textDelta(i, d))
					}
				}
				return out
			}
			for _, d := range deltas {
				if !add("response.output_text.delta", func(b []byte) []byte { return rn.textDeltaBody(b, i, d) }) {
					return out
				}
			}
			if !add("response.output_text.done", func(b []byte) []byte {
				b = append(rn.itemRef(b, i), `,"content_index":0,"text":`...)
				return append(appendString(b, rn.a.Text), `,"logprobs":[]`...)
			}) || !add("response.content_part.done", func(b []byte) []byte { return part(b, rn.a.Text) }) {
				return out
			}
		} else {
			for _, f := range splitText(it.call.Arguments, size) {
				if !add("response.function_call_arguments.delta", func(b []byte) []byte {
					b = appendString(append(rn.itemRef(b, i), `,"delta":`...), f)
					return rn.obfuscation(b)
				}) {
					return out
				}
			}
			if !add("response.function_call_arguments.done", func(b []byte) []byte {
				b = appendString(append(rn.itemRef(b, i), `,"name":`...), it.call.Name)
				return appendString(append(b, `,"arguments":`...), it.call.Arguments)
			}) {
				return out
			}
		}
		if !add("response.output_item.done", func(b []byte) []byte {
			return rn.item(append(b, `,"output_index":`+strconv.Itoa(i)+`,"item":`...), i, "completed")
		}) {
			return out
		}
	}
	add("response.completed", func(b []byte) []byte {
		return rn.responseObject(append(b, `,"response":`...), "completed", true, true)
	})
	if rn.a.Error != "" && rn.a.ErrorAfter >= len(out) {
		// Past the end: the error takes the completion's place (and its
		// sequence number).
		rn.seq = len(out) - 1
		out[len(out)-1] = rn.errorEvent()
	}
	return out
}

func (rn *responsesRenderer) textDelta(i int, d string) []byte {
	return rn.event("response.output_text.delta", func(b []byte) []byte { return rn.textDeltaBody(b, i, d) })
}

func (rn *responsesRenderer) textDeltaBody(b []byte, i int, d string) []byte {
	b = append(rn.itemRef(b, i), `,"content_index":0,"delta":`...)
	b = append(appendString(b, d), `,"logprobs":[]`...)
	return rn.obfuscation(b)
}

// errorEvent is ResponseErrorEvent as the API streams it.
func (rn *responsesRenderer) errorEvent() []byte {
	return rn.event("error", func(b []byte) []byte {
		b = appendString(append(b, `,"code":"server_error","message":`...), rn.a.Error)
		return append(b, `,"param":null`...)
	})
}

// errorBody is the API's error JSON, pretty-printed like its other bodies.
func (rn *responsesRenderer) errorBody(status int, msg string) []byte {
	typ, code := "invalid_request_error", "null"
	if status >= 500 {
		typ, code = "server_error", `"server_error"`
	}
	b := appendString([]byte(`{"error":{"message":`), msg)
	b = append(b, `,"type":"`+typ+`","param":null,"code":`+code+`}}`...)
	return indentOpenAI(b)
}
