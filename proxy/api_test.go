package proxy

import (
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
)

// TestGuardedAPI: each guarded path, under any prefix, maps to its API,
// whose required hooks are all set; other paths pass through.
func TestGuardedAPI(t *testing.T) {
	tests := []struct {
		path string
		want inspect.API // "" for a path that passes through
	}{
		{"/v1/chat/completions", wireapi.Chat},
		{"/chat/completions", wireapi.Chat},
		{"/openai/v1/chat/completions", wireapi.Chat},
		{"/v1/responses", wireapi.Responses},
		{"/responses", wireapi.Responses},
		{"/openai/v1/responses", wireapi.Responses},
		{"/v1/messages", wireapi.Anthropic},
		{"/messages", wireapi.Anthropic},
		{"/anthropic/v1/messages", wireapi.Anthropic},
		{"/api/chat", wireapi.Ollama},
		{"/ollama/api/chat", wireapi.Ollama},
		{"/api/generate", wireapi.OllamaGenerate},
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
