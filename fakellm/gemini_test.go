package fakellm

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/sse"
)

// TestGeminiRule: both dialects, Gemini's and Code Assist's, in each form
// a client asks for, read back as Google's clients read them.
func TestGeminiRule(t *testing.T) {
	s := Start(t, Script{Rules: []Rule{GeminiRule(func(*Request) GeminiAnswer {
		return GeminiAnswer{Thought: "plan", Text: "Reading the file.", Calls: []ToolCall{{Name: "read_file", Arguments: `{"path":"a.go"}`}}}
	})}})
	tests := []struct {
		name, path, body  string
		wantCT, wantModel string
		wantChunks        int
		wantWrapped       bool
	}{
		{"generateContent", "/v1beta/models/gemini-2.5-pro:generateContent", `{"contents":[]}`, "application/json; charset=UTF-8", "gemini-2.5-pro", 1, false},
		{"stream, SSE", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[]}`, "text/event-stream", "gemini-2.5-flash", 1 + 3 + 1, false},
		{"stream, JSON array", "/v1/models/gemini-2.5-flash:streamGenerateContent", `{"contents":[]}`, "application/json; charset=UTF-8", "gemini-2.5-flash", 1 + 3 + 1, false},
		{"Code Assist", "/v1internal:generateContent", `{"model":"gemini-2.5-pro","request":{"contents":[]}}`, "application/json; charset=UTF-8", "gemini-2.5-pro", 1, true},
		{"Code Assist, SSE", "/v1internal:streamGenerateContent?alt=sse", `{"model":"gemini-2.5-pro","request":{"contents":[]}}`, "text/event-stream", "gemini-2.5-pro", 1 + 3 + 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(s.URL()+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); ct != tt.wantCT {
				t.Errorf("Content-Type %q; want %q", ct, tt.wantCT)
			}
			var chunks [][]byte
			switch {
			case strings.Contains(tt.path, "alt=sse"):
				rd := sse.NewReader(bytes.NewReader(body), 0)
				for ev, err := rd.Next(); err == nil; ev, err = rd.Next() {
					if ev.Data != nil {
						chunks = append(chunks, bytes.Clone(ev.Data))
					}
				}
			case strings.Contains(tt.path, "streamGenerateContent"):
				var arr []json.RawMessage
				if err := json.Unmarshal(body, &arr); err != nil {
					t.Fatalf("not a JSON array: %v\n%s", err, body)
				}
				for _, e := range arr {
					chunks = append(chunks, e)
				}
			default:
				chunks = [][]byte{body}
			}
			if len(chunks) != tt.wantChunks {
				t.Fatalf("%d chunks; want %d:\n%s", len(chunks), tt.wantChunks, body)
			}
			var a sse.GeminiAccumulator
			for i, c := range chunks {
				if _, err := a.Add(c); err != nil {
					t.Fatalf("chunk %d: %v: %s", i, err, c)
				}
			}
			name, args, ok := a.ToolCallBytes(0)
			if a.Text() != "Reading the file." || !ok || string(name) != "read_file" || string(args) != `{"path":"a.go"}` ||
				a.FinishReason() != "STOP" || a.Model() != tt.wantModel || a.Wrapped() != tt.wantWrapped {
				t.Errorf("text %q, call %s(%s), finish %q, model %q, wrapped %v", a.Text(), name, args, a.FinishReason(), a.Model(), a.Wrapped())
			}
			// A quarter of the bytes of the request, of the text and of the
			// thought; the thought's tokens are output.
			u, ok := a.Usage()
			if want := (sse.Usage{PromptTokens: len(tt.body) / 4, CompletionTokens: 5 + 1, TotalTokens: len(tt.body)/4 + 6}); !ok || u != want {
				t.Errorf("usage %+v; want %+v", u, want)
			}
		})
	}
}

// TestGeminiNeverEnd: a never-ending Gemini stream repeats its text and
// never finishes.
func TestGeminiNeverEnd(t *testing.T) {
	a := GeminiAnswer{Text: "same ", NeverEnd: true}
	r := a.Render(true, true, false, "m", 10)
	if len(r.RawEvents) < NeverEndEvents || bytes.Contains(bytes.Join(r.RawEvents, nil), []byte("finishReason")) {
		t.Errorf("%d events; want %d without a finishReason", len(r.RawEvents), NeverEndEvents)
	}
}
