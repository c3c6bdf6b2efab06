package fakellm

import (
	"strings"
	"testing"
)

// BenchmarkRenderStream measures rendering a 500-event stream, the load
// generator's workload, so the fake is known not to be the bottleneck.
func BenchmarkRenderStream(b *testing.B) {
	for _, d := range Dialects {
		b.Run(d.String(), func(b *testing.B) {
			resp := Response{Dialect: d, Content: strings.Repeat("token_x ", 500), ChunkSize: 8,
				ToolCalls: []ToolCall{{Name: "bash", Arguments: `{"command":"go test ./..."}`}}}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				out := render(&resp, streamInfo{stream: true, includeUsage: true}, uint64(i))
				if len(out.frames) < 500 {
					b.Fatalf("rendered %d frames", len(out.frames))
				}
			}
		})
	}
}
