package proxy

import (
	"testing"

	"github.com/loopguard/loopguard/observe"
)

func TestAnswerUsage(t *testing.T) {
	tests := []struct {
		name, body string
		want       observe.Usage
	}{
		{"chat", `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`, observe.Usage{Input: 12, Output: 3}},
		{"responses", `{"output":[],"usage":{"input_tokens":20,"output_tokens":5,"total_tokens":25}}`, observe.Usage{Input: 20, Output: 5}},
		{"anthropic", `{"content":[],"usage":{"input_tokens":7,"cache_read_input_tokens":100,"output_tokens":2}}`, observe.Usage{Input: 7, Output: 2}},
		{"gemini", `{"candidates":[],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"totalTokenCount":11}}`, observe.Usage{Input: 9, Output: 2}},
		{"gemini thinking", `{"candidates":[],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"thoughtsTokenCount":40,"totalTokenCount":51}}`, observe.Usage{Input: 9, Output: 42}},
		{"code assist", `{"response":{"candidates":[],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"thoughtsTokenCount":40}},"traceId":"t"}`, observe.Usage{Input: 9, Output: 42}},
		{"none", `{"choices":[]}`, observe.Usage{}},
		{"not an object", `{"usage":"lots"}`, observe.Usage{}},
		// A body that is not JSON is read as far as it goes: a passive
		// observer does not validate it first.
		{"truncated in the usage", `{"choices":[],"usage":{"prompt_tokens":12,"completion_to`, observe.Usage{Input: 12}},
		{"truncated before it", `{"choices":[{"message":{"content":"usage`, observe.Usage{}},
		{"text", `upstream error`, observe.Usage{}},
		{"empty", ``, observe.Usage{}},
	}
	for _, tt := range tests {
		if got := answerUsage([]byte(tt.body)); got != tt.want {
			t.Errorf("%s: answerUsage = %+v; want %+v", tt.name, got, tt.want)
		}
	}
}
