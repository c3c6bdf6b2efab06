package proxy

import (
	"testing"

	"github.com/loopguard/loopguard/inspect"
)

// TestGuardedAPI: each guarded path, under any prefix, maps to its API,
// whose required hooks are all set; other paths pass through.
func TestGuardedAPI(t *testing.T) {
	tests := []struct {
		path string
		want inspect.API // "" for a path that passes through
	}{
		{"/v1/chat/completions", inspect.ChatCompletions},
		{"/chat/completions", inspect.ChatCompletions},
		{"/openai/v1/chat/completions", inspect.ChatCompletions},
		{"/v1/responses", inspect.Responses},
		{"/responses", inspect.Responses},
		{"/openai/v1/responses", inspect.Responses},
		{"/v1/messages", inspect.AnthropicMessages},
		{"/messages", inspect.AnthropicMessages},
		{"/anthropic/v1/messages", inspect.AnthropicMessages},
		{"/api/chat", inspect.OllamaChat},
		{"/ollama/api/chat", inspect.OllamaChat},
		{"/api/generate", inspect.OllamaGenerate},
		{"/api/tags", ""},
		{"/v1/threads/thread_1/messages", ""},
		{"/v1/embeddings", ""},
		{"/v1/responses/resp_1", ""},
	}
	for _, tt := range tests {
		api := guardedAPI([]byte(tt.path))
		if api == nil {
			if tt.want != "" {
				t.Errorf("guardedAPI(%s) = nil; want %s", tt.path, tt.want)
			}
			continue
		}
		if api.name != tt.want {
			t.Errorf("guardedAPI(%s) = %s; want %q", tt.path, api.name, tt.want)
		}
		if api.apply == nil || api.terminate == nil || api.newAnswer == nil || api.holdEvent == nil || api.cutBody == nil {
			t.Errorf("%s lacks a required hook: %+v", api.name, *api)
		}
	}
}
