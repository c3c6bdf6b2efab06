package e2e

import (
	"github.com/loopguard/loopguard/fakellm"
)

// call is one tool call as a client reassembled it.
type call struct {
	Name string `json:"name"`
	Args string `json:"arguments"`
}

// want is what a client must parse out of a scripted answer.
type want struct {
	content string
	calls   []call
	finish  string
	// failStream: the stream carries an in-band error after some content.
	failStream bool
}

// scenario is one scripted answer and its expected parse.
type scenario struct {
	name string
	resp fakellm.Response
	want want
}

// scenarios returns the shapes every dialect is tested with: plain text,
// one tool call, parallel tool calls, and an error in the middle.
func scenarios(d fakellm.Dialect) []scenario {
	readFile := fakellm.ToolCall{Name: "read_file", Arguments: `{"path":"src/main.go"}`}
	bash := fakellm.ToolCall{Name: "bash", Arguments: `{"command":"go test ./... -run 'Test(A|B)' -v"}`}
	text := "Running the tests now. Ünïcödé ✓ and \"quotes\" <tags> & more\nsecond line."
	return []scenario{
		{"text", fakellm.Response{Dialect: d, Content: text, Reasoning: "think first", ChunkSize: 5},
			want{content: text, finish: "stop"}},
		{"tools", fakellm.Response{Dialect: d, Content: "Reading.", ToolCalls: []fakellm.ToolCall{readFile}, ChunkSize: 6},
			want{content: "Reading.", calls: []call{{readFile.Name, readFile.Arguments}}, finish: "tool_calls"}},
		{"parallel", fakellm.Response{Dialect: d, ToolCalls: []fakellm.ToolCall{readFile, bash}, ChunkSize: 7},
			want{calls: []call{{readFile.Name, readFile.Arguments}, {bash.Name, bash.Arguments}}, finish: "tool_calls"}},
		{"error", fakellm.Response{Dialect: d, Content: "Partial answer that dies", ChunkSize: 4, Error: "engine died", ErrorAfter: 4},
			want{failStream: true}},
	}
}
