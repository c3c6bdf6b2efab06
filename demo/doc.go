// Package demo is `loopguard demo`: a self-contained run of the real proxy
// with no LLM. A scripted model (built on e2e/fakellm) and scripted agents
// (real go-openai clients that execute their own canned tool results) talk
// through loopguard over loopback, and the package prints a transcript of
// each turn: what the agent sent, what loopguard did and why, what the model
// saw and what it answered.
//
// Serve keeps the proxy up in front of the scripted model so that any
// OpenAI-compatible client can be tried against it.
//
// demo never opens a socket beyond 127.0.0.1, never sleeps for effect and
// never prints or logs content that did not come from its own script, apart
// from the model and tool names a client chooses to send in Serve mode.
package demo
