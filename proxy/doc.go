// Package proxy is loopguard's HTTP front and back: it accepts the agent's
// request, routes it, runs policy/inspect/inject on the endpoints it guards
// (chat completions, the Responses API, Anthropic Messages, Ollama's
// /api/chat and /api/generate), forwards the request to the upstream and
// streams the answer back event by event (an SSE event, or an NDJSON line),
// inspecting it as it passes and cutting it when it degenerates.
//
// Files follow the request: server.go routes and serves loopguard's own
// endpoints; session.go takes off a /s/<id>/ session prefix and finds the
// client's session id; pipeline.go decides (session, verdict, ladder,
// rewrite or LOOP_DETECTED); forward.go relays the request and answer over
// transport.go's exchange with the upstream (upstream.go: its address and
// connection pool; clientwatch_linux.go: clients that leave); streambody.go
// and http10.go write streams to the client; failsafe.go keeps the stream
// path failing open; resumable.go stops llama.cpp's resumable generations
// that a cut ended.
//
// What differs between the guarded APIs lies behind one wireAPI each
// (api.go): api_chat.go, api_responses.go, api_anthropic.go and
// api_ollama.go apply
// rewrites, answer LOOP_DETECTED, read a streamed answer and write the end
// of a cut one in their API's shape; api_body.go cuts non-streamed answers
// whose text lies in items. answer_observer.go watches an answer on the
// way back, composed of parts: answer_cut.go (degeneration and the cut),
// answer_dedup.go (duplicate tool calls), answer_hold.go
// (stream.hold_tool_calls), answer_trim.go (tail = "trim") and
// answer_record.go with responses_record.go (the Responses history record).
// usage.go reads the tokens answers report.
//
// proxy is the only package that speaks HTTP (fasthttp on both sides); a
// fasthttp.RequestCtx never leaves it. Whatever fails inside the pipeline, the
// request passes through unchanged (fail open).
package proxy
