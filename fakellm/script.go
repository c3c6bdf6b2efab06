package fakellm

import (
	"net/http"
	"time"
)

// Dialect selects whose serializer a Response imitates.
type Dialect int

const (
	// OpenAI is api.openai.com chat completions: system_fingerprint and
	// logprobs on every chunk, role chunk with "content":null (tool turns) or
	// "content":"" plus "refusal":null, empty "arguments" on the first tool
	// delta, pretty-printed non-streamed JSON.
	OpenAI Dialect = iota
	// VLLM is vLLM's OpenAI server (pydantic exclude_unset): no
	// system_fingerprint, name delta without "arguments", "content":null
	// beside tool deltas, two entries for one index in one chunk for every
	// call after the first, "stop_reason" on the finish chunk, errors
	// followed by [DONE].
	VLLM
	// LlamaCpp is llama-server with --jinja: nlohmann ordered keys (choices
	// first), "arguments" always present, reasoning_content, a bare ":"
	// keep-alive before the finish chunk, timings on the last chunk, errors
	// that end the stream without [DONE].
	LlamaCpp
	// Ollama is Ollama's /v1 compatibility layer: fp_ollama, whole tool calls
	// per chunk with "content":"" beside them, "reasoning", ids that collide
	// across requests, JSON bodies ending in a newline (json.Encoder).
	Ollama
)

// String returns the dialect's lower-case name.
func (d Dialect) String() string {
	switch d {
	case OpenAI:
		return "openai"
	case VLLM:
		return "vllm"
	case LlamaCpp:
		return "llamacpp"
	case Ollama:
		return "ollama"
	}
	return "unknown"
}

// Dialects lists every chat dialect, for table tests.
var Dialects = []Dialect{OpenAI, VLLM, LlamaCpp, Ollama}

// DefaultChunkSize is the number of bytes per text delta when
// Response.ChunkSize is zero.
const DefaultChunkSize = 8

// DefaultModel is the model name used when neither the Response nor the
// request names one.
const DefaultModel = "fake-model"

// DefaultCreated is the "created" timestamp of every rendered completion when
// Response.Created is zero; fixed so that rendered bytes are reproducible.
const DefaultCreated = 1761000000

// ToolCall is one function call the scripted model makes.
type ToolCall struct {
	// ID is the call id; empty means one generated in the dialect's style
	// (call_…, chatcmpl-tool-…, bare alphanumerics), deterministic per
	// exchange.
	ID string
	// Name is the function name.
	Name string
	// Arguments is the JSON text of the arguments, streamed in ChunkSize
	// pieces (whole, for Ollama).
	Arguments string
}

// Usage is the token accounting reported in the usage object.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// Response is one scripted answer. Its zero value is a 200 OpenAI answer
// with empty content.
type Response struct {
	// Dialect chooses the serializer to imitate.
	Dialect Dialect
	// Model is the model name in the answer; empty means the request's
	// "model", or DefaultModel.
	Model string
	// ID is the completion id; empty means one in the dialect's style.
	ID string
	// Created is the "created" Unix time; zero means DefaultCreated.
	Created int64

	// Content is the assistant text, streamed in ChunkSize-byte deltas.
	Content string
	// Reasoning is the thinking text, sent before Content as the dialect's
	// reasoning field (OpenAI chat has none, so it is not sent there).
	Reasoning string
	// ToolCalls are the calls made after Content, in index order.
	ToolCalls []ToolCall
	// FinishReason is the finish_reason; empty means "tool_calls" when
	// ToolCalls is set, else "stop".
	FinishReason string
	// Usage overrides the token counts; zero means counts derived from the
	// byte lengths of the request and the answer.
	Usage Usage

	// ChunkSize is the number of bytes per streamed text or argument delta;
	// zero means DefaultChunkSize.
	ChunkSize int
	// Delay is the pause before each streamed event after the first (and
	// before a non-streamed body). Zero sends as fast as the peer reads.
	Delay time.Duration
	// NeverEnd makes a stream repeat its content deltas (or "tick " when
	// Content is empty) until the peer goes away or the server closes,
	// never sending a finish chunk. Without a Delay it pauses
	// neverEndMinDelay between events so a test cannot spin a core.
	NeverEnd bool

	// Error, when set, is the message of an in-band error. Streams send it
	// in the dialect's form after ErrorAfter events and stop; non-streamed
	// answers send it as the dialect's error JSON with Status (default 500).
	Error string
	// ErrorAfter is the number of events sent before the error event.
	ErrorAfter int
	// LegacyError selects llama.cpp's pre-2026 non-standard "error:" SSE
	// field (followed by [DONE]) instead of a data: error event.
	LegacyError bool

	// Status is the HTTP status; zero means 200 (500 for a non-streamed
	// Error). A status >= 400 always answers with the dialect's error JSON,
	// stream or not, as servers reject requests before streaming starts.
	Status int
	// Header holds extra response headers, set after the dialect's own (so
	// they can override them).
	Header http.Header

	// Raw, when non-nil, is sent verbatim as the whole body instead of a
	// rendered answer, with Status and Header (Content-Type defaults to
	// text/event-stream).
	Raw []byte
	// RawEvents, when non-nil, are sent verbatim one write and flush each,
	// with Delay between them: an exact replay of a recorded stream.
	RawEvents [][]byte
}

// Rule answers every request that Match accepts, on any path, before the
// script's ordered responses are consulted. Rules are never used up.
type Rule struct {
	// Match reports whether the rule applies; nil matches every request.
	Match func(*Request) bool
	// Response is the answer. Respond, when set, is called instead.
	Response Response
	// Respond builds the answer from the request (a scripted agent's model
	// can react to the history it receives).
	Respond func(*Request) Response
}

// Script is what a Server plays.
type Script struct {
	// Rules are tried first, in order, on every request.
	Rules []Rule
	// Responses answer chat completion requests in order.
	Responses []Response
	// Loop restarts Responses from the first once they are used up; without
	// it an exhausted script answers 500 with an OpenAI-style error.
	Loop bool
}
