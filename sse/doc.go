// Package sse reads Server-Sent Events and rebuilds streamed chat completions.
//
// It sits on the response side of the flow: proxy hands it every byte read
// from the upstream; Reader splits them into events without copying what it
// need not, and ChatAccumulator folds chat.completion.chunk payloads into the
// final assistant message. ArrayReader splits a stream that is one JSON
// array (Google's streamed answers without alt=sse) into the same Events.
// sse never touches the network and imports none of loopguard's other
// packages but leaf ones under internal/ (rawjson, and wireapi, the
// registry of wire APIs).
//
// Transparency comes first: every byte read comes back in exactly one
// Event.Raw, in order, so a proxy forwards Raw untouched and the client sees
// the upstream's bytes, comments, unknown fields and line endings included.
// Parsing never holds an event back once its blank line has arrived.
//
// Lifetimes follow fasthttp's rules: the slices in an Event alias the
// Reader's buffer until the next Next, the slices in an Update alias the
// accumulator's buffers until the next Add. Neither type is safe for
// concurrent use; both can be Reset and pooled.
//
// Failure is reported, never hidden: ErrEventTooLarge leaves the unparsed
// bytes in Reader.Buffered for a raw fallback, and an in-band error payload
// makes ChatAccumulator.Add return ErrUpstream with the payload kept.
package sse
