package proxy

import (
	"context"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// wireAPI is what the request flow needs to know about one wire API that
// loopguard guards (chat completions, the Responses API, Anthropic
// Messages, Ollama's, Gemini's). Its hooks are fields, as
// httputil.ReverseProxy's are: the flow calls them and never asks which API
// it serves. Each API is one value, declared in its own file (api_chat.go,
// api_responses.go, api_anthropic.go, api_ollama.go, api_gemini.go) with
// its answer (see answer), and registered for its entry of the registry
// (internal/wireapi), which holds its paths, how it asks for a stream, how
// its streams are framed (SSE; NDJSON lines read by ndjson.Reader; a JSON
// array read by sse.ArrayReader, each unit an event) and its upstream.
// Adding an API is its registry entry, one more such file, its inject and
// sse counterparts, and its tests. Every hook but history, readFirst and
// variant is required.
type wireAPI struct {
	// name is the API as inspect and policy know it: its registry name.
	name inspect.API
	// transport is how its turns come (observe.ResponseInfo.Transport):
	// "" for HTTP requests.
	transport string
	// apply writes a decision's warnings, constraints and collapse into a
	// request body (inject.Injector's Apply and its kin).
	apply func(in *inject.Injector, body []byte, e inject.Edit) (inject.Result, error)
	// terminate renders LOOP_DETECTED as the API answers it: a message, a
	// stream or an error, as the request asked.
	terminate func(in *inject.Injector, body []byte, l inject.Loop) (inject.Response, error)
	// history, if not nil, returns the history to judge when a request may
	// continue one the upstream keeps (Responses: responses_record.go), and
	// the record to extend with the answer; failed: the store failed. Nil:
	// the request carries its whole history.
	history func(p *pipeline, ctx context.Context, body []byte) (judged []byte, rec *recordPlan, failed bool)
	// newAnswer returns a reader of one streamed answer, from the API's
	// pool; its release puts it back.
	newAnswer func() answer
	// holdEvent is how the API's tool calls are held (answer_hold.go):
	// (*callHolder).chunkEvent where a call ends when the next begins or
	// the choice finishes (chat), (*callHolder).itemEvent where each call
	// opens and closes with events of its own.
	holdEvent func(h *callHolder, o *answerObserver, ev *sse.Event, out []byte) ([]byte, bool)
	// cutBody cuts a degenerate non-streamed answer where w's detectors
	// find the repetition began, and records the cut in w; nil when the
	// answer is left alone. finish is stream.finish_reason.
	cutBody func(w *cutWatch, b []byte, finish string) []byte
	// textPath is where a streamed event's data carries the text it adds
	// to the answer (chat: choice 0's content), for tail = "trim".
	textPath string
	// readFirst, if not nil, reports whether an event that a cut came
	// with is one the cut replaces rather than follows, because it shows
	// the start of a further call (chat: a chunk that opens a tool call may
	// show the call before it a duplicate). It depends on data alone: the
	// observer asks only once reading the event cut the answer.
	readFirst func(data []byte) bool
	// streamByDefault: a request without a "stream" member is answered
	// as a stream (Ollama's native API); register sets it from the
	// registry.
	streamByDefault bool
	// framing is how its streams are framed; register sets it from the
	// registry unless a variant named another.
	framing wireapi.Framing
	// reg is its registry entry, which register sets.
	reg *wireapi.API
	// variant, if not nil, returns the flow of one request of the API as
	// its path and query ask to be answered: streamed or not (the path,
	// wireapi.StreamMethod), as SSE or not (alt=sse). Gemini's.
	variant func(stream, sse bool) *wireAPI
}

// wireAPIs holds the registered flow of each registry API, at the API's
// index in wireapi.APIs; an API without one passes through unguarded.
var wireAPIs [len(wireapi.APIs)]*wireAPI

// register makes api the flow of its registry entry, and returns it.
func register(api *wireAPI) *wireAPI {
	reg := wireapi.Lookup(api.name)
	api.reg = reg
	api.streamByDefault = reg.Stream == wireapi.StreamUnlessFalse
	if api.framing == wireapi.SSE {
		api.framing = reg.Framing
	}
	wireAPIs[reg.Index()] = api
	return api
}

// guardedRequest is guardedAPI for a request: the variant of its API
// that its path and query ask for (Gemini's streamGenerateContent,
// alt=sse); nil for a request no API guards.
func guardedRequest(ctx *fasthttp.RequestCtx) *wireAPI {
	r := wireapi.Match(ctx.Path())
	if r.API == nil {
		return nil
	}
	api := wireAPIs[r.API.Index()]
	if api != nil && api.variant != nil {
		api = api.variant(r.Stream, string(ctx.QueryArgs().Peek("alt")) == "sse")
	}
	return api
}

// answer reads one streamed answer in its API's shape as it passes, and
// writes the events loopguard ends it with in that shape. It holds the
// API's accumulator from sse (or ndjson); the observer holds one per
// request, and decides what each event's updates come to.
type answer interface {
	// add folds one event's data into the answer and returns what it
	// added: an update for each choice (chat) or whole call (Ollama) the
	// event touched, else one. The updates alias the answer's buffers
	// until the next add. Data it cannot read returns an error and changes
	// nothing.
	add(data []byte) ([]sse.Update, error)
	// toolCall returns the name and arguments of the answer's pos-th tool
	// call (chat: of choice 0), ok false if there is none.
	toolCall(pos int) (name, args []byte, ok bool)
	// usage is the token usage the upstream reported, zero if none.
	usage() sse.Usage
	// appendEnd appends the events that end the stream after the cut e
	// describes. next is nil when the cut came; stop false says that the
	// end waits for one more event (Responses: a duplicate call's
	// output_item.done), and the observer calls appendEnd again with it.
	appendEnd(b []byte, e *ending, next *sse.Event) (_ []byte, stop bool)
	// release empties the answer and returns it to its API's pool.
	release()
}

// ending is what the events that end a cut answer report beside what the
// answer read itself.
type ending struct {
	cut *inspect.Detection
	// replacement, when not empty, is the LOOP_DETECTED answer that takes
	// the place of the held tool call that began at at
	// (stream.hold_tool_calls).
	replacement string
	at          heldCall
	// dropped is how many bytes of the answer's text the client never got
	// (tail = "trim"): the end reports the text as the client got it.
	dropped int64
	// offset is where in the answer's text the degeneration began.
	offset int64
	// bytes is the text generated: the output tokens, estimated.
	bytes int64
	// finishReason is stream.finish_reason.
	finishReason string
	// usage: the request asked for a usage chunk (chat's
	// stream_options.include_usage).
	usage bool
	// model is the request's model, for a stream that named none.
	model string
}

// heldCall is where a held tool call began: its output_index or content
// block index, and the last sequence_number sent before it (Responses).
type heldCall struct{ index, sequence int }

// estimateTokens turns generated text bytes into tokens at about four bytes a token.
func estimateTokens(n int64) int { return int((n + 3) / 4) }
