package inspect

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

// benchAPIBody builds benchBody's healthy n-turn history (~2 KB results)
// in the given API's shape.
func benchAPIBody(api API, n int) []byte {
	out := strings.Repeat("line of output with some words 0123\n", 55)
	var items []any
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("call_%d", i)
		args, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("sed -n '%d,%dp' src/module_%d.py", i, i+40, i%37)})
		res := fmt.Sprintf("<returncode>0</returncode>\n<output>\n%d\n%s</output>", i, out)
		switch api {
		case wireapi.Responses:
			items = append(items,
				map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Looking at the next module."}}},
				map[string]any{"type": "function_call", "call_id": id, "name": "bash", "arguments": string(args)},
				map[string]any{"type": "function_call_output", "call_id": id, "output": res})
		case wireapi.Anthropic:
			var input any
			_ = json.Unmarshal(args, &input)
			items = append(items,
				map[string]any{"role": "assistant", "content": []any{
					map[string]any{"type": "text", "text": "Looking at the next module."},
					map[string]any{"type": "tool_use", "id": id, "name": "bash", "input": input}}},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": res}}})
		}
	}
	var body map[string]any
	if api == wireapi.Responses {
		items = append([]any{map[string]any{"role": "user", "content": "Port the service."}}, items...)
		body = map[string]any{"model": "gpt-5", "instructions": "You are a coding agent.", "input": items}
	} else {
		items = append([]any{map[string]any{"role": "user", "content": "Port the service."}}, items...)
		body = map[string]any{"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "messages": items, "max_tokens": 4096}
	}
	b, _ := json.Marshal(body)
	return b
}

func benchAdapter(b *testing.B, api API, inspect bool) {
	body := benchAPIBody(api, 200)
	e, _ := NewEngine(DefaultConfig())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tr, err := e.ParseAPI(api, body)
		if err != nil {
			b.Fatal(err)
		}
		if len(tr.Steps) != 200 {
			b.Fatalf("%d steps; want 200", len(tr.Steps))
		}
		if inspect {
			if v := e.Inspect(tr); v.Loop {
				b.Fatal("healthy history reported as a loop")
			}
		}
	}
}

// The < 1 ms budget is for a 200-turn history, parse and inspect together.
func BenchmarkParseResponses200(b *testing.B)        { benchAdapter(b, wireapi.Responses, false) }
func BenchmarkParseInspectResponses200(b *testing.B) { benchAdapter(b, wireapi.Responses, true) }
func BenchmarkParseAnthropic200(b *testing.B)        { benchAdapter(b, wireapi.Anthropic, false) }
func BenchmarkParseInspectAnthropic200(b *testing.B) { benchAdapter(b, wireapi.Anthropic, true) }
