// Package proxy is loopguard's HTTP front and back: it accepts the agent's
// request, routes it, runs policy/inspect/inject on chat completions, forwards
// it to the upstream and streams the answer back event by event.
//
// proxy is the only package that speaks HTTP (fasthttp on both sides); a
// fasthttp.RequestCtx never leaves it.
package proxy
