package sse

// Update is what one event added to a streamed answer, whatever its API:
// each accumulator's Add returns it (chat: one for each choice the chunk
// carries), and the caller decides what to make of it. Its slices alias
// the accumulator's buffers and are valid until the next Add or Reset.
type Update struct {
	// Choice is the chat choice's index; 0 in the other APIs.
	Choice int
	// Text is the decoded output text the event added (chat:
	// delta.content).
	Text []byte
	// Reasoning is the decoded reasoning or thinking text the event added
	// (chat: delta.reasoning_content or delta.reasoning).
	Reasoning []byte
	// ToolCall: the chat chunk carried tool-call deltas for this choice.
	ToolCall bool
	// ToolCallStarted is where the first tool call the event began sits,
	// -1 if none began: chat, its position in the choice's tool calls (see
	// Choice.ToolCalls; it equals the wire index on well-formed streams),
	// every call before it being complete, as servers stream calls one
	// after the other; Responses, its output_index; Anthropic, its content
	// block index.
	ToolCallStarted int
	// ToolCallsStarted is how many calls began in the chat chunk (Ollama
	// sends whole calls, several may start at once).
	ToolCallsStarted int
	// ToolCallDone is the position (see ToolCallBytes) of the tool call
	// that the event completed (Responses, Anthropic), -1 if none: its
	// name and arguments are final from this event on.
	ToolCallDone int
	// FinishReason is the chat chunk's finish_reason, nil if it had none.
	// Once it is set, every call of the choice is complete (vLLM may still
	// put the last argument text in the same chunk; it has been added
	// already).
	FinishReason []byte
	// Done is true for the stream's terminal event (response.completed,
	// response.incomplete, response.failed; message_stop).
	Done bool
	// Sequence is the highest sequence_number before the event
	// (Responses): what an event written in its place numbers on from.
	Sequence int
}
