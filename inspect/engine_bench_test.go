package inspect

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchBody builds a healthy history of n turns with ~2 KB tool results
// (200 turns is about 400 KB).
func benchBody(n int) []byte {
	msgs := []any{map[string]any{"role": "system", "content": "You are a coding agent."}, map[string]any{"role": "user", "content": "Port the service."}}
	out := strings.Repeat("line of output with some words 0123\n", 55)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("call_%d", i)
		args, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("sed -n '%d,%dp' src/module_%d.py", i, i+40, i%37)})
		msgs = append(msgs, map[string]any{"role": "assistant", "content": "Looking at the next module.", "tool_calls": []any{
			map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "bash", "arguments": string(args)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": fmt.Sprintf("<returncode>0</returncode>\n<output>\n%d\n%s</output>", i, out)})
	}
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs})
	return b
}

// benchBody20KB builds the realistic per-request size: a 20-turn history
// of about 20 KB, each tool result a few hundred bytes, tools mixed the
// way a coding agent mixes them.
func benchBody20KB() []byte {
	msgs := []any{map[string]any{"role": "system", "content": "You are a coding agent."}, map[string]any{"role": "user", "content": "Fix the failing test."}}
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("call_%d", i)
		var name string
		var args map[string]any
		var res string
		switch i % 4 {
		case 0:
			name, args = "read_file", map[string]any{"path": fmt.Sprintf("src/pkg%d/file%d.go", i%5, i)}
			res = strings.Repeat(fmt.Sprintf("func handler%d(w http.ResponseWriter, r *http.Request) {\n", i), 13)
		case 1:
			name, args = "bash", map[string]any{"command": fmt.Sprintf("grep -rn 'handler%d' src/", i)}
			res = strings.Repeat(fmt.Sprintf("src/pkg%d/file%d.go:%d: handler%d(w, r)\n", i%5, i, 10+i, i), 18)
		case 2:
			name, args = "bash", map[string]any{"command": "go test ./src/..."}
			res = fmt.Sprintf("ok  \tgithub.com/acme/svc/src/pkg%d\t0.%03ds\n", i%5, 100+i) + strings.Repeat("--- PASS: TestHandler (0.00s)\n", 21)
		default:
			name, args = "str_replace_editor", map[string]any{"command": "str_replace", "path": fmt.Sprintf("src/pkg%d/file%d.go", i%5, i), "old_str": fmt.Sprintf("return %d", i), "new_str": fmt.Sprintf("return %d", i+1)}
			res = fmt.Sprintf("The file src/pkg%d/file%d.go has been edited. Here's the result of running `cat -n` on a snippet:\n", i%5, i) + strings.Repeat(fmt.Sprintf("    %d\treturn %d\n", i, i+1), 20)
		}
		a, _ := json.Marshal(args)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": fmt.Sprintf("Step %d: checking the handler.", i), "tool_calls": []any{
			map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": string(a)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": res})
	}
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs})
	return b
}

func benchParseInspect(b *testing.B, turns int) {
	benchParseInspectBody(b, benchBody(turns))
}

func benchParseInspectBody(b *testing.B, body []byte) {
	e, _ := NewEngine(DefaultConfig())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		tr, err := Parse(body)
		if err != nil {
			b.Fatal(err)
		}
		if v := e.Inspect(tr); v.Loop {
			b.Fatal("healthy history reported as a loop")
		}
	}
	// CPU time per op, garbage collection included: steadier than ns/op
	// on a shared machine.
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

func BenchmarkParseInspect20KB(b *testing.B) { benchParseInspectBody(b, benchBody20KB()) }
func BenchmarkParseInspect200(b *testing.B)  { benchParseInspect(b, 200) }
func BenchmarkParseInspect1000(b *testing.B) { benchParseInspect(b, 1000) }

// BenchmarkParse200 and BenchmarkUnmarshal200 compare the gjson builder
// with the naive encoding/json baseline on the same body.
func BenchmarkParse200(b *testing.B) {
	body := benchBody(200)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshal200(b *testing.B) {
	body := benchBody(200)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}
