// Package demo is `loopguard demo`: a self-contained run of the real proxy
// with no LLM. A scripted model (built on fakellm) and scripted agents
// (real go-openai clients that execute their own canned tool results) talk
// through loopguard over loopback, and the package prints a transcript of
// each turn: what the agent sent, what loopguard did and why, what the model
// saw and what it answered.
//
// Serve keeps the proxy up in front of the scripted model so that any
// OpenAI-compatible client can be tried against it.
//
// demo listens only where it is told (127.0.0.1 by default), never sleeps
// for effect, and in Serve mode prints only the session key and loopguard's
// verdict for each request, never the content a client sent.
package demo
