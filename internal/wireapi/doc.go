// Package wireapi is the one registry of the wire APIs loopguard guards:
// each API is declared once, in apis.go (with the upstream wires), with the paths it answers, how its
// requests carry their conversation, its metrics label, how it asks for and
// frames a stream, and the upstream family (Wire) whose base URL serves it.
//
// Every other part reads this table instead of keeping a list of its own:
// routing in proxy (guardedAPI, upstreamFor), inspect's DetectAPI and its
// adapters, policy's session keys, replay's paths, observe's path labels,
// agentrun's base-URL variables and fakellm's routes. Adding an API is one
// entry here, plus the parts only it can have: its trajectory adapter
// (inspect), its rewriting (inject), its answer accumulator (sse), its
// flow hooks (proxy) and its fake dialect (fakellm).
//
// The registry is a leaf package under internal/, as internal/rawjson is:
// it imports nothing but the standard library, so inspect and sse, which
// import none of loopguard's flow packages, can still read it, and no
// package outside this module depends on its shape. It does no I/O and
// keeps no state beyond its tables.
package wireapi
