package fakellm

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// neverEndTick is streamed forever by a NeverEnd response without Content.
const neverEndTick = "tick "

var (
	framePrefix = []byte("data: ")
	frameEnd    = []byte("\n\n")
	doneFrame   = []byte("data: [DONE]\n\n")
	// keepAliveFrame is llama-server's idle keep-alive: a bare comment line
	// (it broke Ollama's parser, ollama PR #16443, so it is worth replaying).
	keepAliveFrame = []byte(":\n\n")
)

// rendered is a Response turned into bytes for one request.
type rendered struct {
	status int
	header http.Header
	stream bool
	body   []byte   // non-streamed body
	frames [][]byte // stream events in order
	repeat [][]byte // NeverEnd: frames cycled after frames
	errs   [][]byte // in-band error frames sent after ErrorAfter events
}

// streamInfo is what the request asked of the answer.
type streamInfo struct {
	stream       bool
	includeUsage bool
	model        string
	bodyLen      int
}

// renderer holds the per-answer constants of one dialect.
type renderer struct {
	r       *Response
	d       Dialect
	id      string
	model   string
	created int64
	fp      string
	usage   Usage
	calls   []ToolCall
	rng     *rand.Rand
}

func newRenderer(resp *Response, req streamInfo, seq uint64) *renderer {
	rn := &renderer{r: resp, d: resp.Dialect, rng: rand.New(rand.NewPCG(seq, uint64(resp.Dialect)))}
	rn.model = resp.Model
	if rn.model == "" {
		rn.model = req.model
	}
	if rn.model == "" {
		rn.model = DefaultModel
	}
	rn.created = resp.Created
	if rn.created == 0 {
		rn.created = DefaultCreated
	}
	rn.id = resp.ID
	if rn.id == "" {
		switch rn.d {
		case VLLM:
			rn.id = "chatcmpl-" + rn.randString(32, hexDigits)
		case LlamaCpp:
			rn.id = "chatcmpl-" + rn.randString(24, alnum)
		case Ollama:
			// Ollama draws 0..998, so ids collide across requests.
			rn.id = "chatcmpl-" + strconv.Itoa(rn.rng.IntN(999))
		default:
			rn.id = "chatcmpl-" + rn.randString(29, alnum)
		}
	}
	switch rn.d {
	case OpenAI:
		rn.fp = "fp_" + rn.randString(10, hexDigits)
	case LlamaCpp:
		rn.fp = "b6500-1a2b3c4d"
	case Ollama:
		rn.fp = "fp_ollama"
	}
	rn.calls = make([]ToolCall, len(resp.ToolCalls))
	for i, c := range resp.ToolCalls {
		if c.ID == "" {
			switch rn.d {
			case VLLM:
				c.ID = "chatcmpl-tool-" + rn.randString(32, hexDigits)
			case LlamaCpp:
				c.ID = rn.randString(24, alnum)
			case Ollama:
				c.ID = "call_" + rn.randString(8, lowerAlnum)
			default:
				c.ID = "call_" + rn.randString(24, alnum)
			}
		}
		rn.calls[i] = c
	}
	rn.usage = resp.Usage
	if rn.usage == (Usage{}) {
		n := len(resp.Content) + len(resp.Reasoning)
		for _, c := range resp.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
		rn.usage = Usage{PromptTokens: req.bodyLen/4 + 1, CompletionTokens: n/4 + 1}
	}
	return rn
}

const (
	hexDigits  = "0123456789abcdef"
	alnum      = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	lowerAlnum = "abcdefghijklmnopqrstuvwxyz0123456789"
)

func (rn *renderer) randString(n int, alphabet string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rn.rng.IntN(len(alphabet))]
	}
	return string(b)
}

func (rn *renderer) finishReason() string {
	if rn.r.FinishReason != "" {
		return rn.r.FinishReason
	}
	if len(rn.calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// render turns resp into the answer to a request described by req.
func render(resp *Response, req streamInfo, seq uint64) *rendered {
	out := &rendered{header: http.Header{}}
	if resp.Raw != nil || resp.RawEvents != nil {
		out.status = resp.Status
		out.header.Set("Content-Type", "text/event-stream")
		if resp.RawEvents != nil {
			out.stream = true
			out.frames = resp.RawEvents
		} else {
			out.body = resp.Raw
		}
		copyHeader(out.header, resp.Header)
		if out.status == 0 {
			out.status = http.StatusOK
		}
		return out
	}
	rn := newRenderer(resp, req, seq)
	status := resp.Status
	if status >= 400 || (resp.Error != "" && !req.stream) {
		if status == 0 {
			status = http.StatusInternalServerError
		}
		msg := resp.Error
		if msg == "" {
			msg = http.StatusText(status)
		}
		out.status = status
		out.body = rn.errorBody(status, msg)
		rn.setHeaders(out.header, false)
	} else if req.stream {
		out.stream = true
		out.status = http.StatusOK
		if status != 0 {
			out.status = status
		}
		rn.setHeaders(out.header, true)
		rn.stream(out, req.includeUsage)
	} else {
		out.status = http.StatusOK
		if status != 0 {
			out.status = status
		}
		rn.setHeaders(out.header, false)
		out.body = rn.completion()
	}
	copyHeader(out.header, resp.Header)
	return out
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
}

// setHeaders writes the headers each server sends (content types as their
// frameworks spell them: Starlette adds "; charset=utf-8" to SSE, gin and
// cpp-httplib do not).
func (rn *renderer) setHeaders(h http.Header, stream bool) {
	switch rn.d {
	case OpenAI:
		if stream {
			h.Set("Content-Type", "text/event-stream; charset=utf-8")
		} else {
			h.Set("Content-Type", "application/json")
		}
		h.Set("Openai-Processing-Ms", "42")
		h.Set("Openai-Version", "2020-10-01")
		h.Set("X-Request-Id", "req_"+rn.randString(32, hexDigits))
		h.Set("Access-Control-Expose-Headers", "X-Request-ID")
	case VLLM:
		if stream {
			h.Set("Content-Type", "text/event-stream; charset=utf-8")
		} else {
			h.Set("Content-Type", "application/json")
		}
		h.Set("Server", "uvicorn")
	case LlamaCpp:
		if stream {
			h.Set("Content-Type", "text/event-stream")
		} else {
			h.Set("Content-Type", "application/json; charset=utf-8")
		}
		h.Set("Server", "llama.cpp")
	case Ollama:
		if stream {
			h.Set("Content-Type", "text/event-stream")
		} else {
			h.Set("Content-Type", "application/json; charset=utf-8")
		}
	}
}

// frame wraps one JSON payload as an SSE data event.
func frame(payload []byte) []byte {
	b := make([]byte, 0, len(framePrefix)+len(payload)+len(frameEnd))
	b = append(b, framePrefix...)
	b = append(b, payload...)
	return append(b, frameEnd...)
}

// stream fills out.frames (and repeat, errs) with the dialect's events.
func (rn *renderer) stream(out *rendered, includeUsage bool) {
	size := rn.r.ChunkSize
	var deltas []string // delta objects, in order, before the finish chunk
	var repeat []string

	reasoning := splitText(rn.r.Reasoning, size)
	content := splitText(rn.r.Content, size)
	switch rn.d {
	case OpenAI:
		if rn.r.Content == "" && len(rn.calls) > 0 {
			deltas = append(deltas, `{"role":"assistant","content":null}`)
		} else {
			deltas = append(deltas, `{"role":"assistant","content":"","refusal":null}`)
		}
		// OpenAI chat completions never stream reasoning text.
	case VLLM:
		deltas = append(deltas, `{"role":"assistant","content":""}`)
		for _, p := range reasoning {
			deltas = append(deltas, string(appendString([]byte(`{"reasoning":`), p))+"}")
		}
	case LlamaCpp:
		deltas = append(deltas, `{"role":"assistant","content":null}`)
		for _, p := range reasoning {
			deltas = append(deltas, string(appendString([]byte(`{"reasoning_content":`), p))+"}")
		}
	case Ollama:
		// Ollama has no separate role chunk: the role rides on the first.
		for _, p := range reasoning {
			deltas = append(deltas, string(appendString([]byte(`{"content":"","reasoning":`), p))+"}")
		}
	}
	for _, p := range content {
		deltas = append(deltas, string(appendString([]byte(`{"content":`), p))+"}")
	}
	if rn.r.NeverEnd {
		repeat = append([]string(nil), deltas[len(deltas)-len(content):]...)
		if len(repeat) == 0 {
			repeat = []string{`{"content":"` + neverEndTick + `"}`}
		}
	}
	if !rn.r.NeverEnd {
		deltas = append(deltas, rn.toolDeltas(size)...)
	}
	if rn.d == Ollama {
		if len(deltas) == 0 {
			deltas = append(deltas, `{"role":"assistant","content":""}`)
		} else {
			deltas[0] = `{"role":"assistant",` + deltas[0][1:]
		}
	}

	for _, d := range deltas {
		out.frames = append(out.frames, frame(rn.chunk(d, "", false, includeUsage)))
	}
	for _, d := range repeat {
		out.repeat = append(out.repeat, frame(rn.chunk(d, "", false, includeUsage)))
	}
	if !rn.r.NeverEnd {
		if rn.d == LlamaCpp {
			out.frames = append(out.frames, keepAliveFrame)
		}
		out.frames = append(out.frames, frame(rn.chunk("{}", rn.finishReason(), !includeUsage, includeUsage)))
		if includeUsage {
			out.frames = append(out.frames, frame(rn.usageChunk()))
		}
		out.frames = append(out.frames, doneFrame)
	}
	if rn.r.Error != "" {
		out.errs = rn.errorFrames(rn.r.Error)
	}
}

// toolDeltas renders the tool-call deltas in the dialect's shape.
func (rn *renderer) toolDeltas(size int) []string {
	var out []string
	for i, c := range rn.calls {
		idx := strconv.Itoa(i)
		frags := splitText(c.Arguments, size)
		switch rn.d {
		case OpenAI:
			b := []byte(`{"tool_calls":[{"index":` + idx + `,"id":`)
			b = appendString(b, c.ID)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, c.Name)
			b = append(b, `,"arguments":""}}]}`...)
			out = append(out, string(b))
			for _, f := range frags {
				out = append(out, argDelta(`{"tool_calls":[`, idx, f)+"]}")
			}
		case VLLM:
			b := []byte(`{"content":null,"tool_calls":[{"id":`)
			b = appendString(b, c.ID)
			b = append(b, `,"type":"function","index":`+idx+`,"function":{"name":`...)
			b = appendString(b, c.Name)
			b = append(b, `}}`...)
			if i > 0 && len(frags) > 0 {
				// hermes emits the name and the first arguments of a later
				// call as two entries with the same index in one chunk.
				b = append(b, argDelta(",", idx, frags[0])...)
				frags = frags[1:]
			}
			out = append(out, string(b)+"]}")
			for _, f := range frags {
				out = append(out, argDelta(`{"content":null,"tool_calls":[`, idx, f)+"]}")
			}
		case LlamaCpp:
			first := ""
			if len(frags) > 0 {
				first, frags = frags[0], frags[1:]
			}
			b := []byte(`{"tool_calls":[{"index":` + idx + `,"id":`)
			b = appendString(b, c.ID)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, c.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, first)
			b = append(b, `}}]}`...)
			out = append(out, string(b))
			for _, f := range frags {
				out = append(out, argDelta(`{"tool_calls":[`, idx, f)+"]}")
			}
		case Ollama:
			b := []byte(`{"content":"","tool_calls":[{"id":`)
			b = appendString(b, c.ID)
			b = append(b, `,"index":`+idx+`,"type":"function","function":{"name":`...)
			b = appendString(b, c.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, c.Arguments)
			b = append(b, `}}]}`...)
			out = append(out, string(b))
		}
	}
	return out
}

func argDelta(prefix, idx, frag string) string {
	b := []byte(prefix + `{"index":` + idx + `,"function":{"arguments":`)
	b = appendString(b, frag)
	return string(append(b, `}}`...))
}

// chunk renders one chat.completion.chunk. finish "" means null. timings adds
// llama.cpp's timings (it puts them on the last chunk of the stream).
func (rn *renderer) chunk(delta, finish string, timings, includeUsage bool) []byte {
	b := make([]byte, 0, 256+len(delta))
	fin := func(b []byte) []byte {
		if finish == "" {
			return append(b, "null"...)
		}
		return appendString(b, finish)
	}
	switch rn.d {
	case OpenAI:
		b = rn.head(b, "chat.completion.chunk")
		b = append(b, `,"service_tier":"default","system_fingerprint":`...)
		b = appendString(b, rn.fp)
		b = append(b, `,"choices":[{"index":0,"delta":`...)
		b = append(b, delta...)
		b = append(b, `,"logprobs":null,"finish_reason":`...)
		b = fin(b)
		b = append(b, "}]"...)
		if includeUsage {
			// With include_usage the API sends "usage":null on every
			// chunk but the last (2024 recordings omitted it).
			b = append(b, `,"usage":null`...)
		}
		b = rn.appendObfuscation(b)
		b = append(b, '}')
	case VLLM:
		b = rn.head(b, "chat.completion.chunk")
		b = append(b, `,"choices":[{"index":0,"delta":`...)
		b = append(b, delta...)
		b = append(b, `,"logprobs":null,"finish_reason":`...)
		b = fin(b)
		if finish != "" {
			b = append(b, `,"stop_reason":null`...)
		}
		b = append(b, "}]}"...)
	case LlamaCpp:
		b = append(b, `{"choices":[{"finish_reason":`...)
		b = fin(b)
		b = append(b, `,"index":0,"delta":`...)
		b = append(b, delta...)
		b = append(b, "}]"...)
		b = rn.llamaTail(b, "chat.completion.chunk")
		if timings {
			b = rn.appendTimings(b)
		}
		b = append(b, '}')
	case Ollama:
		b = rn.head(b, "chat.completion.chunk")
		b = append(b, `,"system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":`...)
		b = append(b, delta...)
		b = append(b, `,"finish_reason":`...)
		b = fin(b)
		b = append(b, "}]}"...)
	}
	return b
}

// appendObfuscation adds the random padding OpenAI has put on streamed
// chunks since 2025 (stream_options.include_obfuscation defaults to true);
// its length varies to hide the token sizes.
func (rn *renderer) appendObfuscation(b []byte) []byte {
	b = append(b, `,"obfuscation":"`...)
	b = append(b, rn.randString(1+rn.rng.IntN(12), alnum)...)
	return append(b, '"')
}

// head appends {"id":…,"object":…,"created":…,"model":… (no closing brace).
func (rn *renderer) head(b []byte, object string) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, rn.id)
	b = append(b, `,"object":"`+object+`","created":`...)
	b = appendInt(b, rn.created)
	b = append(b, `,"model":`...)
	return appendString(b, rn.model)
}

// llamaTail appends llama.cpp's keys after "choices".
func (rn *renderer) llamaTail(b []byte, object string) []byte {
	b = append(b, `,"created":`...)
	b = appendInt(b, rn.created)
	b = append(b, `,"id":`...)
	b = appendString(b, rn.id)
	b = append(b, `,"model":`...)
	b = appendString(b, rn.model)
	b = append(b, `,"system_fingerprint":`...)
	b = appendString(b, rn.fp)
	return append(b, `,"object":"`+object+`"`...)
}

func (rn *renderer) appendTimings(b []byte) []byte {
	u := rn.usage
	return append(b, `,"timings":{"cache_n":0,"prompt_n":`+strconv.Itoa(u.PromptTokens)+
		`,"prompt_ms":41.2,"prompt_per_token_ms":1.87,"prompt_per_second":533.9,"predicted_n":`+
		strconv.Itoa(u.CompletionTokens)+`,"predicted_ms":402.5,"predicted_per_token_ms":12.98,"predicted_per_second":77.0}`...)
}

// usageObject renders the usage object in the dialect's key order.
func (rn *renderer) usageObject(b []byte) []byte {
	p, c := strconv.Itoa(rn.usage.PromptTokens), strconv.Itoa(rn.usage.CompletionTokens)
	t := strconv.Itoa(rn.usage.PromptTokens + rn.usage.CompletionTokens)
	switch rn.d {
	case OpenAI:
		return append(b, `{"prompt_tokens":`+p+`,"completion_tokens":`+c+`,"total_tokens":`+t+
			`,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`...)
	case VLLM:
		return append(b, `{"prompt_tokens":`+p+`,"total_tokens":`+t+`,"completion_tokens":`+c+`}`...)
	case LlamaCpp:
		return append(b, `{"completion_tokens":`+c+`,"prompt_tokens":`+p+`,"total_tokens":`+t+`}`...)
	default:
		return append(b, `{"prompt_tokens":`+p+`,"completion_tokens":`+c+`,"total_tokens":`+t+`}`...)
	}
}

// usageChunk renders the include_usage chunk: "choices":[] plus usage.
func (rn *renderer) usageChunk() []byte {
	var b []byte
	switch rn.d {
	case OpenAI:
		b = rn.head(b, "chat.completion.chunk")
		b = append(b, `,"service_tier":"default","system_fingerprint":`...)
		b = appendString(b, rn.fp)
		b = append(b, `,"choices":[],"usage":`...)
		b = rn.usageObject(b)
		b = rn.appendObfuscation(b)
		return append(b, '}')
	case VLLM:
		b = rn.head(b, "chat.completion.chunk")
		b = append(b, `,"choices":[],"usage":`...)
	case LlamaCpp:
		b = append(b, `{"choices":[]`...)
		b = rn.llamaTail(b, "chat.completion.chunk")
		b = append(b, `,"usage":`...)
		b = rn.usageObject(b)
		b = rn.appendTimings(b)
		return append(b, '}')
	case Ollama:
		b = rn.head(b, "chat.completion.chunk")
		b = append(b, `,"system_fingerprint":"fp_ollama","choices":[],"usage":`...)
	}
	b = rn.usageObject(b)
	return append(b, '}')
}

// errorFrames renders an error after the 200 in the dialect's form.
func (rn *renderer) errorFrames(msg string) [][]byte {
	switch rn.d {
	case VLLM:
		// Python json.dumps with its default ", " and ": " separators,
		// then [DONE] (vLLM's stream generator always ends with it).
		b := appendString([]byte(`{"error": {"message": `), msg)
		b = append(b, `, "type": "InternalServerError", "param": null, "code": 500}}`...)
		return [][]byte{frame(b), doneFrame}
	case LlamaCpp:
		b := appendString([]byte(`{"code":500,"message":`), msg)
		b = append(b, `,"type":"server_error"}`...)
		if rn.r.LegacyError {
			// Builds through 2025 wrote a non-standard "error:" field
			// (llama.cpp PR #16109): spec parsers drop it silently.
			line := append([]byte("error: "), b...)
			return [][]byte{append(line, frameEnd...), doneFrame}
		}
		return [][]byte{frame(append(append([]byte(`{"error":`), b...), '}'))}
	case Ollama:
		b := appendString([]byte(`{"error":{"message":`), msg)
		return [][]byte{frame(append(b, `,"type":"api_error","param":null,"code":null}}`...))}
	default:
		b := appendString([]byte(`{"error":{"message":`), msg)
		return [][]byte{frame(append(b, `,"type":"server_error","param":null,"code":null}}`...))}
	}
}

// errorBody renders an error answered before any streaming, with status.
func (rn *renderer) errorBody(status int, msg string) []byte {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	switch rn.d {
	case VLLM:
		vtyp := "BadRequestError"
		if status >= 500 {
			vtyp = "InternalServerError"
		}
		b := appendString([]byte(`{"error":{"message":`), msg)
		return append(b, `,"type":"`+vtyp+`","param":null,"code":`+strconv.Itoa(status)+`}}`...)
	case LlamaCpp:
		b := []byte(`{"error":{"code":` + strconv.Itoa(status) + `,"message":`)
		b = appendString(b, msg)
		return append(b, `,"type":"`+typ+`"}}`...)
	case Ollama:
		b := appendString([]byte(`{"error":{"message":`), msg)
		return append(b, `,"type":"api_error","param":null,"code":null}}`+"\n"...)
	default:
		b := appendString([]byte(`{"error":{"message":`), msg)
		b = append(b, `,"type":"`+typ+`","param":null,"code":null}}`...)
		return indentOpenAI(b)
	}
}

// indentOpenAI pretty-prints like api.openai.com (two spaces, trailing
// newline); json.Indent keeps key order and string bytes.
func indentOpenAI(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return b
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// completion renders a non-streamed chat.completion.
func (rn *renderer) completion() []byte {
	b := make([]byte, 0, 512+len(rn.r.Content))
	content := func(b []byte) []byte {
		if rn.r.Content == "" && len(rn.calls) > 0 {
			return append(b, "null"...)
		}
		return appendString(b, rn.r.Content)
	}
	calls := func(b []byte, withIndex bool, idFirst bool) []byte {
		b = append(b, `,"tool_calls":[`...)
		for i, c := range rn.calls {
			if i > 0 {
				b = append(b, ',')
			}
			if idFirst {
				b = appendString(append(b, `{"id":`...), c.ID)
				if withIndex {
					b = append(b, `,"index":`+strconv.Itoa(i)...)
				}
				b = append(b, `,"type":"function","function":{"name":`...)
			} else {
				b = append(b, `{"type":"function","function":{"name":`...)
			}
			b = appendString(b, c.Name)
			b = appendString(append(b, `,"arguments":`...), c.Arguments)
			b = append(b, '}')
			if !idFirst {
				b = appendString(append(b, `,"id":`...), c.ID)
			}
			b = append(b, '}')
		}
		return append(b, ']')
	}
	switch rn.d {
	case OpenAI:
		b = rn.head(b, "chat.completion")
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = content(b)
		b = append(b, `,"refusal":null,"annotations":[]`...)
		if len(rn.calls) > 0 {
			b = calls(b, false, true)
		}
		b = append(b, `},"logprobs":null,"finish_reason":`...)
		b = appendString(b, rn.finishReason())
		b = append(b, `}],"usage":`...)
		b = rn.usageObject(b)
		b = append(b, `,"service_tier":"default","system_fingerprint":`...)
		b = appendString(b, rn.fp)
		return indentOpenAI(append(b, '}'))
	case VLLM:
		b = rn.head(b, "chat.completion")
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = content(b)
		b = append(b, `,"refusal":null,"annotations":null,"audio":null,"function_call":null`...)
		if len(rn.calls) > 0 {
			b = calls(b, false, true)
		} else {
			b = append(b, `,"tool_calls":[]`...)
		}
		b = append(b, `,"reasoning":`...)
		if rn.r.Reasoning == "" {
			b = append(b, "null"...)
		} else {
			b = appendString(b, rn.r.Reasoning)
		}
		b = append(b, `},"logprobs":null,"finish_reason":`...)
		b = appendString(b, rn.finishReason())
		b = append(b, `,"stop_reason":null}],"service_tier":null,"system_fingerprint":null,"usage":`...)
		b = rn.usageObject(b)
		return append(b, `,"prompt_logprobs":null,"kv_transfer_params":null}`...)
	case LlamaCpp:
		b = append(b, `{"choices":[{"finish_reason":`...)
		b = appendString(b, rn.finishReason())
		b = append(b, `,"index":0,"message":{"role":"assistant","content":`...)
		b = content(b)
		if rn.r.Reasoning != "" {
			b = appendString(append(b, `,"reasoning_content":`...), rn.r.Reasoning)
		}
		if len(rn.calls) > 0 {
			b = calls(b, false, false)
		}
		b = append(b, `}}],"created":`...)
		b = appendInt(b, rn.created)
		b = appendString(append(b, `,"model":`...), rn.model)
		b = appendString(append(b, `,"system_fingerprint":`...), rn.fp)
		b = append(b, `,"object":"chat.completion","usage":`...)
		b = rn.usageObject(b)
		b = appendString(append(b, `,"id":`...), rn.id)
		b = rn.appendTimings(b)
		return append(b, '}')
	default: // Ollama
		b = rn.head(b, "chat.completion")
		b = append(b, `,"system_fingerprint":"fp_ollama","choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = appendString(b, rn.r.Content)
		if rn.r.Reasoning != "" {
			b = appendString(append(b, `,"reasoning":`...), rn.r.Reasoning)
		}
		if len(rn.calls) > 0 {
			b = calls(b, true, true)
		}
		b = append(b, `},"finish_reason":`...)
		b = appendString(b, rn.finishReason())
		b = append(b, `}],"usage":`...)
		b = rn.usageObject(b)
		// json.Encoder.Encode ends every body with a newline.
		return append(b, "}\n"...)
	}
}
