package proxy

import (
	"github.com/loopguard/loopguard/observe"
	"github.com/tidwall/gjson"
)

// answerUsage reads the usage object of a non-streamed answer of any of the
// three APIs: chat's prompt_tokens and completion_tokens, or the input_tokens
// and output_tokens of Responses and Anthropic Messages.
func answerUsage(body []byte) observe.Usage {
	u := gjson.GetBytes(body, "usage")
	if !u.IsObject() {
		return observe.Usage{}
	}
	in, out := u.Get("prompt_tokens"), u.Get("completion_tokens")
	if !in.Exists() && !out.Exists() {
		in, out = u.Get("input_tokens"), u.Get("output_tokens")
	}
	return observe.Usage{Input: int(in.Int()), Output: int(out.Int())}
}
