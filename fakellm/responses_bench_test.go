package fakellm

import (
	"strings"
	"testing"
)

// BenchmarkAPIRender measures rendering one streamed answer of 2 KiB text
// and one call in each non-chat dialect, the work a Rule does per request.
func BenchmarkAPIRender(b *testing.B) {
	text := strings.Repeat("The build fails on a missing rule. ", 60)
	call := ToolCall{Name: "bash", Arguments: `{"command":"make build"}`}
	b.Run("responses", func(b *testing.B) {
		a := ResponsesAnswer{Text: text, Calls: []ToolCall{call}}
		b.ReportAllocs()
		for b.Loop() {
			_ = a.Render(true, "gpt-4.1", 4096, 1)
		}
	})
	b.Run("anthropic", func(b *testing.B) {
		a := AnthropicAnswer{Text: text, Calls: []ToolCall{call}}
		b.ReportAllocs()
		for b.Loop() {
			_ = a.Render(true, "claude", 4096, 1)
		}
	})
}
