// Package proxy is loopguard's HTTP front and back: it accepts the agent's
// request, routes it, runs policy/inspect/inject on the endpoints it guards
// (chat completions, the Responses API, Anthropic Messages, Ollama's
// /api/chat and /api/generate), forwards the request to the upstream and
// streams the answer back event by event (an SSE event, or an NDJSON line),
// inspecting it as it passes and cutting it when it degenerates.
//
// Files follow the request. Coming in: accept.go (the listener, which
// waits out a shortage of descriptors), server.go (routing and loopguard's
// own endpoints), budget.go (the memory all request bodies hold together),
// path.go (dot-segments resolved before the upstream's base is joined),
// session_id.go (the /s/<id>/ prefix and the session id the client names,
// from which policy/identity.go derives the session's identity),
// encoding.go (compressed request bodies decoded for inspection), and
// pipeline.go (session, verdict, ladder, rewrite or LOOP_DETECTED).
// Going out: forward.go sends the request and relays a non-streamed answer
// over transport.go's exchange with the upstream (upstream.go: its address
// and connection pool; chunked.go: its chunked answers; resumable.go:
// stopping llama.cpp's resumable generations a cut ended). Coming back:
// stream.go relays a streamed answer event by event, watches it and cuts
// it, read top to bottom; streambody.go writes streams to the client on the
// connection fasthttp hands over, and gives it back for the next request,
// with sendlimit*.go bounding a write to a client that stopped reading;
// clientwatch*.go notice clients that leave; encoding_stream.go decodes a stream the upstream
// compressed anyway, which is then relayed decoded like any other;
// failsafe.go keeps the rest of the answer's path failing open; errors.go
// writes loopguard's own errors.
// socket.go and socket_turn.go do the same for the Responses API's
// WebSocket mode: the relay, and each response.create as a turn, whose
// events, framed one a message, take the stream relay's event step.
//
// What differs between the guarded APIs lies behind one wireAPI each
// (api.go): api_chat.go, api_responses.go, api_anthropic.go and
// api_ollama.go apply rewrites, answer LOOP_DETECTED, read a streamed
// answer (their answer's add returns what each event added) and write the
// end of a cut one in their API's shape; api_body.go cuts non-streamed
// answers whose text lies in items. answer_observer.go watches an answer
// on the way back and decides: it pulls each event's updates from the
// API's answer, feeds the text to the degeneration detectors (its
// cutWatch) and asks the API for the end of a cut stream; its parts act on
// the tool calls and on what is held back: answer_dedup.go (duplicate tool
// calls), answer_hold.go (stream.hold_tool_calls), answer_trim.go
// (tail = "trim") and answer_record.go with responses_record.go (the
// Responses history record). So a Responses stream is cut in stream.go,
// answer_observer.go, api_responses.go and inject/responses.go. usage.go
// reads the tokens answers report; hooks.go is what the proxy tells
// observe of each request; config.go is its configuration.
// Why the stream path is shaped as it is: docs/streams.md.
//
// proxy is the only package that speaks HTTP (fasthttp on both sides); a
// fasthttp.RequestCtx never leaves it. Whatever fails inside the pipeline, the
// request passes through unchanged (fail open).
package proxy
