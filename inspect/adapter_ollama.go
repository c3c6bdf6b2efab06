package inspect

import "github.com/loopguard/loopguard/internal/wireapi"

func init() {
	adapters[wireapi.Ollama] = (*parser).ollamaChat
	adapters[wireapi.OllamaGenerate] = (*parser).ollamaGenerate
}

// ollamaChat walks an Ollama /api/chat body. Its messages are chat
// completions' with three differences the chat walker already reads or
// skips: tool-call arguments are a JSON object (canonicalised as chat's
// string arguments are), an assistant's "thinking" is no rule's text, and
// a tool result names its tool ("tool_name") instead of a call id. Results
// are paired with calls by order within the latest step and by that name
// (findCall); a result that also carries a tool_call_id (newer clients)
// is paired by the id, as in chat.
func (p *parser) ollamaChat(root string) error { return p.chat(root) }

// ollamaGenerate walks an Ollama /api/generate body: a prompt and options,
// no turns, so the trajectory has no step. A body that continues one with
// "context" (token ids) carries no history either.
func (p *parser) ollamaGenerate(root string) error {
	_, model := historyAndModel(root, "prompt")
	p.t.Model = p.rawStr(model)
	return nil
}
