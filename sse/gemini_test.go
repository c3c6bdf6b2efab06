package sse

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
)

// geminiChunks returns the data of every event of a Gemini stream file,
// read as its framing says (.sse: events; .json: a JSON array).
func geminiChunks(t testing.TB, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile("testdata/gemini/" + name)
	if err != nil {
		t.Fatal(err)
	}
	next := NewReader(bytes.NewReader(b), 0).Next
	if bytes.HasSuffix([]byte(name), []byte(".json")) {
		next = NewArrayReader(bytes.NewReader(b), 0).Next
	}
	var out [][]byte
	for {
		ev, err := next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Data != nil {
			out = append(out, bytes.Clone(ev.Data))
		}
	}
}

func TestGeminiAccumulator(t *testing.T) {
	tests := []struct {
		file            string
		wantText        string
		wantReasoning   string
		wantUsage       Usage
		wantModel       string
		wantWrapped     bool
		wantCallAtChunk int
	}{
		{"stream.sse", "Let me look", "", Usage{9, 12, 21}, "gemini-2.5-flash", false, 1},
		{"stream-array.json", `Let me look at "main.go" [and] {the} rest`, "", Usage{9, 12, 21}, "gemini-2.5-flash", false, 1},
		{"code-assist.sse", "Let me look", "Reading.", Usage{9, 15, 21}, "gemini-2.5-pro", true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var a GeminiAccumulator
			var reasoning []byte
			for i, data := range geminiChunks(t, tt.file) {
				u, err := a.Add(data)
				if err != nil {
					t.Fatalf("Add(chunk %d): %v", i, err)
				}
				reasoning = append(reasoning, u.Reasoning...)
				if (u.ToolCallStarted == 0) != (i == tt.wantCallAtChunk) || u.ToolCallDone != u.ToolCallStarted {
					t.Errorf("chunk %d: call started %d, done %d", i, u.ToolCallStarted, u.ToolCallDone)
				}
				if u.Done != (i == tt.wantCallAtChunk) {
					t.Errorf("chunk %d: Done %v", i, u.Done)
				}
			}
			name, args, ok := a.ToolCallBytes(0)
			if !ok || string(name) != "read_file" || string(args) != `{"path": "main.go"}` && string(args) != "{\n                \"path\": \"main.go\"\n              }" {
				t.Errorf("ToolCallBytes(0) = %q, %q, %v", name, args, ok)
			}
			u, _ := a.Usage()
			if a.Text() != tt.wantText || string(reasoning) != tt.wantReasoning || u != tt.wantUsage ||
				a.Model() != tt.wantModel || a.Wrapped() != tt.wantWrapped || a.FinishReason() != "STOP" {
				t.Errorf("text %q, reasoning %q, usage %+v, model %q, wrapped %v, finish %q; want %q, %q, %+v, %q, %v, STOP",
					a.Text(), reasoning, u, a.Model(), a.Wrapped(), a.FinishReason(),
					tt.wantText, tt.wantReasoning, tt.wantUsage, tt.wantModel, tt.wantWrapped)
			}
		})
	}
}

func TestGeminiAccumulatorErrors(t *testing.T) {
	var a GeminiAccumulator
	if _, err := a.Add([]byte(`[1]`)); !errors.Is(err, ErrInvalidChunk) {
		t.Errorf("Add(array) = %v; want ErrInvalidChunk", err)
	}
	e := []byte(`{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}`)
	if _, err := a.Add(e); !errors.Is(err, ErrUpstream) || !bytes.Equal(a.ErrorRaw(), e) {
		t.Errorf("Add(error) = %v, raw %s; want ErrUpstream and the payload", err, a.ErrorRaw())
	}
	if u, err := a.Add(nil); err != nil || u.ToolCallStarted != -1 {
		t.Errorf("Add(nil) = %+v, %v", u, err)
	}
}

// FuzzGeminiAccumulator: no panic on any chunk; a call it reports is there.
func FuzzGeminiAccumulator(f *testing.F) {
	for _, name := range []string{"stream.sse", "code-assist.sse", "stream-array.json"} {
		for _, c := range geminiChunks(f, name) {
			f.Add(c)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a GeminiAccumulator
		u, err := a.Add(data)
		if err != nil {
			return
		}
		if u.ToolCallStarted >= 0 {
			if _, _, ok := a.ToolCallBytes(u.ToolCallStarted); !ok {
				t.Fatalf("call %d reported, not found", u.ToolCallStarted)
			}
		}
	})
}

// BenchmarkGeminiAccumulator folds Code Assist's stream, chunk by chunk.
func BenchmarkGeminiAccumulator(b *testing.B) {
	chunks := geminiChunks(b, "code-assist.sse")
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	var a GeminiAccumulator
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		a.Reset()
		for _, c := range chunks {
			if _, err := a.Add(c); err != nil {
				b.Fatal(err)
			}
		}
	}
}
