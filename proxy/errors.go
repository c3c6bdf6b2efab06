package proxy

import (
	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/valyala/fasthttp"
)

// writeJSON answers with a JSON body of loopguard's own.
func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// writeError answers with an OpenAI-shaped error, which every OpenAI SDK
// parses into its error type.
func writeError(ctx *fasthttp.RequestCtx, status int, message, typ, code string) {
	writeJSON(ctx, status, inject.ErrorBody(message, typ, code))
}

// ndjsonErrorLine is sseErrorEvent for an NDJSON stream: Ollama's own
// error shape, {"error": "..."}, on a line of its own.
func ndjsonErrorLine(err error) []byte {
	b := append([]byte(`{"error":`), rawjson.AppendQuote(nil, "loopguard: upstream stream failed: "+errorReason(err))...)
	return append(b, "}\n"...)
}

// sseErrorEvent frames an error for a stream whose 200 status is already
// sent: a `data:` line, because SDKs ignore other SSE fields
// (docs/streams.md: errors inside a 200 stream).
func sseErrorEvent(err error) []byte {
	_, code := upstreamErrorStatus(err)
	b := append([]byte("data: "), inject.ErrorBody("loopguard: upstream stream failed: "+errorReason(err), "upstream_error", code)...)
	return append(b, "\n\n"...)
}
