package proxy

import (
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/observe"
	"github.com/tidwall/gjson"
)

// answerUsage reads the usage object of a non-streamed answer of any of the
// APIs: chat's prompt_tokens and completion_tokens, the input_tokens and
// output_tokens of Responses and Anthropic Messages, Gemini's usageMetadata
// (geminiUsage), or Ollama's top-level prompt_eval_count and eval_count.
// body need not have passed
// rawjson.Valid: the walkers never read past it, and a body that is not
// JSON has no usage to find. They skip the answer's text from quote to
// quote; gjson's Get parsed all of it to reach a usage at the end
// (docs/streams.md).
func answerUsage(body []byte) observe.Usage {
	usage, ok := firstMember(rawjson.View(body), "usage")
	if !ok || usage[0] != '{' {
		if u, ok := geminiUsage(rawjson.View(body)); ok {
			return u
		}
		return ollamaUsage(rawjson.View(body))
	}
	var v [4]string // chat's counts, then Responses' and Anthropic's
	firstMembers(usage, []string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens"}, v[:])
	in, out := v[0], v[1]
	if in == "" && out == "" {
		in, out = v[2], v[3]
	}
	return observe.Usage{Input: int(gjson.Parse(in).Int()), Output: int(gjson.Parse(out).Int())}
}

// firstMember returns the raw value of the first member named name of the
// object s holds, ok false when there is none.
func firstMember(s, name string) (v string, ok bool) {
	rawjson.MembersWith(s, func(k string, at int) int {
		end := rawjson.ValueEnd(s, at)
		if k == name {
			v, ok = s[at:end], end > at
			return -1
		}
		return end
	})
	return v, ok
}

// firstMembers sets vals[i] to the raw value of the first member of the
// object s named names[i] (the first of a name counts, as for gjson's Get),
// leaving "" where there is none.
func firstMembers(s string, names, vals []string) {
	rawjson.Members(s, func(k, v string) bool {
		for i, name := range names {
			if k == name && vals[i] == "" {
				vals[i] = v
				break
			}
		}
		return true
	})
}

// codeAssistAnswer is the member that wraps each of Code Assist's answers.
var codeAssistAnswer = wireapi.Lookup(wireapi.CodeAssist).AnswerWrap

// geminiUsage reads the usageMetadata object of a Gemini answer, Code
// Assist's under its wrapping member, ok false when there is none: the
// prompt's promptTokenCount in, candidatesTokenCount and
// thoughtsTokenCount out (thoughts are output the model generated, as the
// streams count them: sse.GeminiAccumulator).
func geminiUsage(s string) (u observe.Usage, ok bool) {
	meta, found := firstMember(s, "usageMetadata")
	if !found || meta[0] != '{' {
		wrapped, found := firstMember(s, codeAssistAnswer)
		if !found || wrapped[0] != '{' {
			return u, false
		}
		if meta, found = firstMember(wrapped, "usageMetadata"); !found || meta[0] != '{' {
			return u, false
		}
	}
	var v [3]string // prompt, candidates, thoughts
	firstMembers(meta, []string{"promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount"}, v[:])
	out := gjson.Parse(v[1]).Int() + gjson.Parse(v[2]).Int()
	return observe.Usage{Input: int(gjson.Parse(v[0]).Int()), Output: int(out)}, true
}

// ollamaUsage reads the counts of an Ollama /api/chat or /api/generate
// answer, which has no usage object: prompt_eval_count and eval_count at
// the top level.
func ollamaUsage(s string) observe.Usage {
	var in, out string
	rawjson.MembersWith(s, func(k string, at int) int {
		end := rawjson.ValueEnd(s, at)
		// The first of a name counts, as for gjson's Get.
		switch {
		case k == "prompt_eval_count" && in == "":
			in = s[at:end]
		case k == "eval_count" && out == "":
			out = s[at:end]
		}
		return end
	})
	return observe.Usage{Input: int(gjson.Parse(in).Int()), Output: int(gjson.Parse(out).Int())}
}
