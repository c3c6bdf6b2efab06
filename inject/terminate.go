package inject

import (
	"encoding/hex"
	"github.com/loopguard/loopguard/internal/rawjson"
	"io"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"
)

// Header is one HTTP response header.
type Header struct {
	Name, Value string
}

// Response is an HTTP answer loopguard writes itself instead of calling the
// upstream. The proxy copies it onto its response as is.
type Response struct {
	Status int
	Header []Header
	Body   []byte
}

// Content types of loopguard's answers.
const (
	contentJSON = "application/json"
	contentSSE  = "text/event-stream"
)

// The error form's type and code (docs/design.md section 4).
const (
	LoopErrorType = "loop_detected"
	LoopErrorCode = "LOOP_DETECTED"
)

// idPrefix starts the id of every completion loopguard answers itself, so that
// logs tell them from the upstream's.
const idPrefix = "chatcmpl-loopguard-"

// Terminate answers a request without calling the upstream, ending the
// agent's loop (docs/design.md section 4). body is the chat request: its model,
// stream and stream_options.include_usage shape the answer.
//
// By default (terminate_as = "message") the answer is HTTP 200 with one
// assistant message, no tool calls and finish_reason "stop", whose content
// starts with LOOP_DETECTED: and summarises the loop: a chat.completion
// object, or for a streaming request chat.completion.chunk events (role,
// content, finish, the usage chunk when the request asked for it) and
// data: [DONE]. Agents treat it as the model's final answer and stop.
//
// With terminate_as = "error" it is an OpenAI-shaped error of type
// loop_detected with Config.ErrorStatus and x-should-retry: false, which the
// official SDKs raise instead of retrying; a streaming request gets the same
// JSON error, as OpenAI itself answers errors before a stream starts.
func (in *Injector) Terminate(body []byte, l Loop) (Response, error) {
	content, err := in.TerminateText(l)
	if err != nil {
		return Response{}, err
	}
	if in.cfg.TerminateAs == AsError {
		typ, code := errorKind(l)
		return in.errorAnswer(ErrorBody(content, typ, code)), nil
	}
	req := gjson.GetMany(rawjson.View(body), "model", "stream", "stream_options.include_usage")
	c := completion{
		id:      in.newID(),
		created: in.now().Unix(),
		model:   req[0].String(),
		content: content,
	}
	if c.model == "" {
		c.model = "loopguard"
	}
	if req[1].Bool() {
		return Response{
			Status: http.StatusOK,
			Header: []Header{{"Content-Type", contentSSE}, {"Cache-Control", "no-cache"}},
			Body:   c.appendStream(nil, req[2].Bool()),
		}, nil
	}
	return Response{
		Status: http.StatusOK,
		Header: []Header{{"Content-Type", contentJSON}},
		Body:   c.appendJSON(nil),
	}, nil
}

// errorAnswer is the error form of a LOOP_DETECTED answer: a status the
// official SDKs do not retry, and x-should-retry: false for those that
// honour it.
func (in *Injector) errorAnswer(body []byte) Response {
	return Response{
		Status: in.cfg.ErrorStatus,
		Header: []Header{{"Content-Type", contentJSON}, {"X-Should-Retry", "false"}},
		Body:   body,
	}
}

// TerminateText renders the LOOP_DETECTED content for l on its own, for an
// answer already under way: the proxy replaces a held tool call of a stream
// with it. With l.Budget it is the BUDGET_EXCEEDED content instead.
func (in *Injector) TerminateText(l Loop) (string, error) {
	if l.Budget != nil {
		return budgetExceeded(l.Budget), nil
	}
	return in.render(in.tpl.terminate, in.notice(l))
}

// ErrorBody renders an OpenAI-shaped error object,
// {"error":{"message":...,"type":...,"param":null,"code":...}}; an empty
// code is written as null, as OpenAI does. The proxy uses it for its own
// 413, 502 and 504 answers.
func ErrorBody(message, typ, code string) []byte {
	b := make([]byte, 0, len(message)+len(typ)+len(code)+64)
	b = append(b, `{"error":{"message":`...)
	b = rawjson.AppendQuote(b, message)
	b = append(b, `,"type":`...)
	b = rawjson.AppendQuote(b, typ)
	b = append(b, `,"param":null,"code":`...)
	if code == "" {
		b = append(b, "null"...)
	} else {
		b = rawjson.AppendQuote(b, code)
	}
	return append(b, "}}"...)
}

// newID returns chatcmpl-loopguard-<24 hex digits>.
func (in *Injector) newID() string {
	var r [12]byte
	if _, err := io.ReadFull(in.random, r[:]); err != nil {
		// The id only needs to be unlikely to repeat; the clock will do.
		return idPrefix + strconv.FormatInt(in.now().UnixNano(), 16)
	}
	return idPrefix + hex.EncodeToString(r[:])
}

// completion is one LOOP_DETECTED answer.
type completion struct {
	id      string
	created int64
	model   string
	content string
}

// zeroUsage: loopguard answered without a model, so nothing was used.
const zeroUsage = `{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`

// appendJSON appends the chat.completion object.
func (c completion) appendJSON(b []byte) []byte {
	b = c.appendHead(b, "chat.completion")
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	b = rawjson.AppendQuote(b, c.content)
	b = append(b, `,"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":`...)
	b = append(b, zeroUsage...)
	return append(b, '}')
}

// appendStream appends the answer as SSE chunk events, the way OpenAI
// streams: a role chunk, the content, a finish chunk, with includeUsage the
// usage chunk (empty choices; "usage":null on the others), then [DONE].
func (c completion) appendStream(b []byte, includeUsage bool) []byte {
	chunk := func(b []byte, choice string, withContent bool) []byte {
		b = append(b, "data: "...)
		b = c.appendHead(b, "chat.completion.chunk")
		b = append(b, `,"choices":[`...)
		b = append(b, choice...)
		if withContent {
			b = rawjson.AppendQuote(b, c.content)
			b = append(b, `},"logprobs":null,"finish_reason":null}`...)
		}
		b = append(b, ']')
		if includeUsage {
			b = append(b, `,"usage":null`...)
		}
		return append(b, "}\n\n"...)
	}
	b = chunk(b, `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}`, false)
	b = chunk(b, `{"index":0,"delta":{"content":`, true)
	b = chunk(b, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}`, false)
	if includeUsage {
		b = append(b, "data: "...)
		b = c.appendHead(b, "chat.completion.chunk")
		b = append(b, `,"choices":[],"usage":`...)
		b = append(b, zeroUsage...)
		b = append(b, "}\n\n"...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// appendHead appends the object's opening fields, without the closing brace.
func (c completion) appendHead(b []byte, object string) []byte {
	b = append(b, `{"id":`...)
	b = rawjson.AppendQuote(b, c.id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, c.created, 10)
	b = append(b, `,"model":`...)
	return rawjson.AppendQuote(b, c.model)
}
