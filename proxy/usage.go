package proxy

import (
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
)

// usage returns the token usage the upstream reported for the answer o
// watched: from its accumulator for a stream, from the body for a plain
// answer (read by body into bodyUsage).
func (o *chatObserver) usage() observe.Usage {
	if o.bodyUsage != (observe.Usage{}) {
		return o.bodyUsage
	}
	var u sse.Usage
	switch o.pl.api.name {
	case inspect.Responses:
		u, _ = o.racc.Usage()
	case inspect.AnthropicMessages:
		u, _ = o.aacc.Usage()
	default:
		u, _ = o.acc.Usage()
	}
	return observe.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
}

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
