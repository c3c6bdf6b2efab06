package judge

import "encoding/json"

// systemPrompt defines a loop the way the judges in the field learned to:
// the same approach repeated without progress, in any words, and a list of
// what is not one (batch work, debugging that moves), because a judge
// without it flags legitimate repetitive work.
const systemPrompt = `You review the recent steps of an AI agent working on a task and decide whether it is stuck in a loop.

A loop: over at least five recent steps the agent keeps trying the same idea and it keeps failing or yielding nothing new, even when each attempt is worded differently or uses different commands. Examples: rewording the same failing approach; alternating between the same two hypotheses without new evidence; re-planning or re-summarising without acting; retrying what already failed, expecting another outcome.

NOT a loop:
- the same tool on different files or targets (batch work the task asks for);
- edits of the same file at different places;
- reads or searches of different paths or terms that each return something new;
- retrying with arguments changed in response to what came back;
- re-running a build or test after changing code;
- errors that change from one attempt to the next (debugging progress).
Compare what each step tries and what comes back, not tool names. When in doubt, say not stuck with a low confidence.

Answer with JSON only: {"stuck": true or false, "confidence": how sure you are that the agent is stuck, from 0 to 1, "what_repeats": a short phrase naming the repeated approach, or "" when not stuck}.`

// verdictSchema constrains the answer where the endpoint supports
// response_format json_schema (OpenAI, llama-server, vLLM); others ignore
// it, and ParseVerdict reads the object out of the prose.
var verdictSchema = json.RawMessage(`{"type":"json_schema","json_schema":{"name":"loop_verdict","strict":true,"schema":{"type":"object","properties":{"stuck":{"type":"boolean"},"confidence":{"type":"number","minimum":0,"maximum":1},"what_repeats":{"type":"string","maxLength":200}},"required":["stuck","confidence","what_repeats"],"additionalProperties":false}}}`)

// requestBody is the chat completion request of one check.
func requestBody(model, digest string, maxTokens int) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	b, _ := json.Marshal(struct {
		Model          string          `json:"model"`
		Messages       []message       `json:"messages"`
		Temperature    float64         `json:"temperature"`
		MaxTokens      int             `json:"max_tokens"`
		Stream         bool            `json:"stream"`
		ResponseFormat json.RawMessage `json:"response_format"`
	}{
		Model: model,
		Messages: []message{
			{Role: "system", Content: systemPrompt},
			{Role: "user", Content: digest + "\nIs the agent stuck? Answer with the JSON verdict only."},
		},
		MaxTokens:      maxTokens,
		ResponseFormat: verdictSchema,
	})
	return b
}
