package ndjson

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestOllamaAccumulator(t *testing.T) {
	tests := []struct {
		file      string
		wantText  string
		wantCalls []string // name args
		wantGen   bool
		wantUsage [2]int
	}{
		{"ollama-chat-text.ndjson", "ayer captured renewalparts affirmushedsan creation FE unintention Consequently neighbour", nil, false, [2]int{31, 12}},
		{"ollama-chat-tools.ndjson", "", []string{`ls {"path":"src"}`}, false, [2]int{156, 49}},
		{"ollama-generate.ndjson", "", nil, true, [2]int{31, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile("testdata/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			var a Ollama
			var text strings.Builder
			done := 0
			for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
				u, err := a.Add(l)
				if err != nil {
					t.Fatal(err)
				}
				text.Write(u.Text)
				if u.Done {
					done++
				}
			}
			if tt.wantText != "" && text.String() != tt.wantText {
				t.Errorf("text %q; want %q", text.String(), tt.wantText)
			}
			if done != 1 || !a.Done() || a.Generate() != tt.wantGen || string(a.Model()) != "tiny" || len(a.CreatedAt()) == 0 {
				t.Errorf("done %d/%v generate %v model %q", done, a.Done(), a.Generate(), a.Model())
			}
			if a.Calls() != len(tt.wantCalls) {
				t.Fatalf("%d calls; want %d", a.Calls(), len(tt.wantCalls))
			}
			for i, w := range tt.wantCalls {
				name, args, _ := a.ToolCall(i)
				if got := string(name) + " " + string(args); got != w {
					t.Errorf("call %d = %s; want %s", i, got, w)
				}
			}
			if u, ok := a.Usage(); !ok || u.PromptTokens != tt.wantUsage[0] || u.CompletionTokens != tt.wantUsage[1] {
				t.Errorf("usage %+v", u)
			}
		})
	}
	var a Ollama
	if _, err := a.Add([]byte(`"x"`)); err == nil {
		t.Error("a string line was read")
	}
}

// TestOllamaAddAllocs: a text line costs no allocation once the buffers
// have grown.
func TestOllamaAddAllocs(t *testing.T) {
	line := []byte(`{"model":"tiny","created_at":"2026-11-27T13:32:17.734724733Z","message":{"role":"assistant","content":"line\n two"},"done":false}`)
	var a Ollama
	n := 0
	fn := func(u Update, _ error) { n += len(u.Text) }
	fn(a.Add(line))
	if got := testing.AllocsPerRun(1000, func() { fn(a.Add(line)) }); got != 0 {
		t.Errorf("%v allocations a line; want 0", got)
	}
}

// FuzzOllamaAdd: no line panics the accumulator, and one it accepts
// leaves its calls readable.
func FuzzOllamaAdd(f *testing.F) {
	for _, name := range []string{"ollama-chat-text.ndjson", "ollama-chat-tools.ndjson", "ollama-generate.ndjson"} {
		if b, err := os.ReadFile("testdata/" + name); err == nil {
			for _, l := range bytes.Split(b, []byte("\n")) {
				f.Add(l)
			}
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var a Ollama
		if _, err := a.Add(line); err != nil {
			return
		}
		for i := 0; i < a.Calls(); i++ {
			if _, _, ok := a.ToolCall(i); !ok {
				t.Fatalf("call %d of %d unreadable", i, a.Calls())
			}
		}
	})
}
