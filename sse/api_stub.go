package sse

import (
	"errors"
	"io"
)

// TEMPORARY CONTRACT STUB: the sse helper replaces this file.

// ErrEventTooLarge reports an event longer than the reader's maximum.
var ErrEventTooLarge = errors.New("sse: event too large")

// Event is one dispatched SSE event (or a comment block).
// Its slices alias the Reader's buffer and are valid until the next call to Next.
type Event struct {
	Raw   []byte // the event's bytes exactly as received, terminating blank line included
	Name  []byte // value of the event: field, nil if absent
	Data  []byte // data: lines joined with '\n'
	ID    []byte
	Retry int // -1 if absent
	// Comment is true when the event held only comment lines.
	Comment bool
}

// Reader splits a byte stream into events.
type Reader struct{ r io.Reader }

// NewReader returns a reader whose buffer grows up to max bytes per event.
func NewReader(r io.Reader, max int) *Reader { return &Reader{r: r} }

// Next returns the next event. At EOF it returns any unterminated trailing
// bytes as a last event (Raw set, possibly with Data) and then io.EOF.
func (r *Reader) Next() (Event, error) { return Event{}, io.EOF }

// Delta is what one chunk added to one choice. Slices alias the chunk.
type Delta struct {
	Choice    int
	Content   []byte // decoded text of delta.content
	Reasoning []byte // decoded text of delta.reasoning_content or delta.reasoning
	ToolCall  bool   // the chunk carried tool-call deltas for this choice
}

// ChatAccumulator rebuilds the final message(s) of a streamed chat completion.
type ChatAccumulator struct{}

// Add folds one event's data (a chat.completion.chunk JSON) into the
// accumulator and calls fn for each choice delta. It reports an error event
// ({"error":...}) as ErrUpstream.
func (a *ChatAccumulator) Add(data []byte, fn func(Delta)) error { return nil }
