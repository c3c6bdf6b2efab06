// Package proxy is loopguard's HTTP front and back: it accepts the agent's
// request, routes it, runs policy/inspect/inject on the endpoints it guards
// (chat completions, the Responses API, Anthropic Messages), forwards the
// request to the upstream and streams the answer back event by event,
// inspecting it as it passes and cutting it when it degenerates.
//
// Files follow the request: server.go routes and serves loopguard's own
// endpoints; session.go takes off a /s/<id>/ session prefix and finds the
// client's session id; chat.go decides (session, verdict, ladder, rewrite or
// LOOP_DETECTED); forward.go relays the request and answer over
// transport.go's exchange with the upstream (upstream.go: its address and
// connection pool; clientwatch_linux.go: clients that leave); streambody.go
// and http10.go write streams to the client; failsafe.go keeps the stream
// path failing open; chat_stream.go, chat_hold.go, chat_trim.go and
// stream_apis.go inspect answers on the way back, usage.go reads the tokens
// they report; responses_record.go keeps server-side Responses histories in
// view; resumable.go stops llama.cpp's resumable generations that a cut
// ended.
//
// proxy is the only package that speaks HTTP (fasthttp on both sides); a
// fasthttp.RequestCtx never leaves it. Whatever fails inside the pipeline, the
// request passes through unchanged (fail open).
package proxy
