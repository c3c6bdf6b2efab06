// Package sse reads Server-Sent Events and rebuilds streamed chat completions.
//
// It sits on the response side of the flow: proxy hands it every byte read
// from the upstream; Reader splits them into events without copying what it
// need not, and ChatAccumulator folds chat.completion.chunk payloads into the
// final assistant message. sse never touches the network and imports none of
// loopguard's other packages.
package sse
