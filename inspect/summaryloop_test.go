package inspect

import "testing"

func TestSummaryLoop(t *testing.T) {
	const rateLimit = "litellm.RateLimitError: RateLimitError: OpenAIException - Error code: 429 - rate limit reached for requests"
	plans := []string{"say:I will now refactor the parser module to split it in two.", "user:continue",
		"say:Next step: split the parser module into two files as planned.", "user:continue",
		"say:I am going to split the parser module into two separate files.", "user:continue",
		"say:Now I will split the parser module into two files."}
	same := []string{"say:I will run the tests next to confirm the fix works.", "user:continue",
		"say:I will run the tests next to confirm the fix works.", "user:continue",
		"say:I will run the tests next to confirm that the fix works.", "user:continue",
		"say:I will run the tests next to confirm the fix works."}
	runFamily(t, SummaryLoop, []familyCase{
		// The loop it exists for: talking instead of working, and failing
		// answers turn after turn (Roo Code's no-tool-use count).
		{name: "summary loop", give: append([]string{"bash:ls=>a"}, plans[:5]...), want: warned},
		{name: "the same promise x3", give: append([]string{"bash:ls=>a"}, same[:5]...), want: stopped},
		{name: "empty answers across new questions", give: []string{"say:", "user:Hello? That was empty.", "say:", "user:Please answer the question.", "say:"}, want: stopped},
		{name: "a rate-limit error written as the answer x3", give: []string{"bash:ls=>a", "say:" + rateLimit, "user:try again", "say:" + rateLimit, "user:Please go on", "say:" + rateLimit}, want: stopped},
		{name: "context length exceeded x3, counts changing", give: []string{"bash:ls=>a",
			"say:Error: This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens.", "user:continue",
			"say:Error: This model's maximum context length is 128000 tokens. However, your messages resulted in 131590 tokens.", "user:continue",
			"say:Error: This model's maximum context length is 128000 tokens. However, your messages resulted in 132001 tokens."}, want: stopped},

		// Healthy near-misses.
		{name: "a chat without tools", give: []string{"say:Go has goroutines and channels for concurrency.", "user:And Rust?",
			"say:Rust has threads, async tasks and ownership rules that prevent data races.", "user:And Python?",
			"say:Python has threads, processes and asyncio; the GIL limits CPU-bound threads."}, want: silent},
		{name: "two text-only turns", give: append([]string{"bash:ls=>a"}, same[:3]...), want: absent},
		{name: "text-only turns, then work again", give: append(append([]string{"bash:ls=>a"}, same[:5]...), "user:continue", "bash:pytest -q=>3 passed"), want: absent},
		{name: "a final summary after the work", give: []string{"bash:pytest -q=>1 failed", `edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = 2"}=>ok`,
			"bash:pytest -q=>3 passed", "say:The fix is in a.py: x starts at 2, and all three tests pass now."}, want: silent},
		{name: "text-only turns before a genuine new task", give: append(append([]string{"bash:ls=>a"}, same[:5]...),
			"user:Thanks! Now write a README section about installing the tool.", "say:Here is the section: run go install."), want: absent},

		// Thresholds: summary_count N fires at N text-only turns, not at N-1.
		{name: "summary_count 4: 3 turns", give: append([]string{"bash:ls=>a"}, same[:5]...), cfg: func(c *Config) { c.SummaryCount = 4 }, want: absent},
		{name: "summary_count 4: 4 turns", give: append([]string{"bash:ls=>a"}, same...), cfg: func(c *Config) { c.SummaryCount = 4 }, want: stopped},
		{name: "summary_count 4: 3 empty answers", give: []string{"say:", "user:Hello?", "say:", "user:Hello??", "say:"}, cfg: func(c *Config) { c.SummaryCount = 4 }, want: absent},
		{name: "summary_count 4: 4 empty answers", give: []string{"say:", "user:Hello?", "say:", "user:Hello??", "say:", "user:Anyone?", "say:"}, cfg: func(c *Config) { c.SummaryCount = 4 }, want: stopped},
	})
}
