package fakellm

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestOllamaRule(t *testing.T) {
	s := Start(t, Script{Rules: []Rule{OllamaRule(func(*Request) OllamaAnswer {
		return OllamaAnswer{Text: "Reading the file.", Calls: []ToolCall{{Name: "read_file", Arguments: `{"path":"a.go"}`}}}
	})}})
	tests := []struct {
		name, path, body string
		wantCT           string
		wantLines        int
		wantText         string
	}{
		{"chat streams by default", "/api/chat", `{"model":"qwen3","messages":[]}`, "application/x-ndjson", 5, "message.content"},
		{"chat not streamed", "/api/chat", `{"model":"qwen3","stream":false,"messages":[]}`, "application/json; charset=utf-8", 1, "message.content"},
		{"generate", "/api/generate", `{"model":"qwen3","prompt":"hi"}`, "application/x-ndjson", 4, "response"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(s.URL()+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); ct != tt.wantCT {
				t.Errorf("Content-Type %q; want %q", ct, tt.wantCT)
			}
			var lines []string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if len(lines) != tt.wantLines {
				t.Fatalf("%d lines; want %d: %q", len(lines), tt.wantLines, lines)
			}
			var text strings.Builder
			for i, l := range lines {
				if !gjson.Valid(l) || gjson.Get(l, "model").String() != "qwen3" || gjson.Get(l, "done").Bool() != (i == len(lines)-1) {
					t.Errorf("line %d: %s", i, l)
				}
				text.WriteString(gjson.Get(l, tt.wantText).String())
			}
			if text.String() != "Reading the file." {
				t.Errorf("text %q", text.String())
			}
			last := lines[len(lines)-1]
			calls := 0
			for _, l := range lines {
				if gjson.Get(l, "message.tool_calls.0.function.arguments.path").String() == "a.go" {
					calls++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tt.path == "/api/chat"]; calls != want {
				t.Errorf("%d lines with a whole tool call and object arguments; want %d: %q", calls, want, lines)
			}
			if gjson.Get(last, "done_reason").String() != "stop" || !gjson.Get(last, "eval_count").Exists() {
				t.Errorf("final line %s", last)
			}
		})
	}
}
