package intercept

import (
	"net"
	"strings"
)

// A ModelHost is a host that serves a model API to agents: `loopguard run`
// intercepts the agent's connections to it, and its requests go through
// the proxy's pipeline. Every path on it is forwarded as sent; the proxy
// inspects the paths of the APIs it guards wherever they are.
type ModelHost struct {
	Name string
	// API is the wire API the host's model calls speak, and where.
	API string
	// Agents are the agents and sign-ins known to call it.
	Agents string
}

// ModelHosts are the model hosts loopguard intercepts in `loopguard run`,
// besides those of [run] hosts and -resolve. README.md lists them.
var ModelHosts = []ModelHost{
	{"api.openai.com", "chat completions, Responses (/v1/...)", "Codex (API key), OpenAI SDKs, opencode, pi, Qwen Code with an OpenAI key"},
	{"chatgpt.com", "Responses (/backend-api/codex/responses, HTTP and WebSocket)", "Codex, opencode and pi signed in with ChatGPT"},
	{"api.anthropic.com", "Anthropic Messages (/v1/messages)", "Claude Code (Claude.ai or key), pi (Claude Pro/Max), Continue (cn)"},
	{"api.githubcopilot.com", "chat completions, Responses, Messages (/chat/completions, /responses, /v1/messages)", "opencode signed in with GitHub Copilot"},
	{"api.individual.githubcopilot.com", "as api.githubcopilot.com", "pi signed in with GitHub Copilot"},
	{"api.business.githubcopilot.com", "as api.githubcopilot.com", "Copilot Business seats"},
	{"api.enterprise.githubcopilot.com", "as api.githubcopilot.com", "Copilot Enterprise seats"},
	{"opencode.ai", "chat completions, Responses, Messages (/zen/v1/...)", "opencode with no sign-in (Zen)"},
	{"openrouter.ai", "chat completions (/api/v1/chat/completions)", "OpenRouter users of any agent"},
	{"api.cline.bot", "chat completions (/api/v1/chat/completions)", "Cline signed in with a Cline account"},
	{"coding.dashscope.aliyuncs.com", "chat completions (/v1/chat/completions)", "Qwen Code with a Coding Plan"},
	{"dashscope.aliyuncs.com", "chat completions (/compatible-mode/v1/chat/completions)", "Qwen Code with a DashScope key"},
	{"dashscope-intl.aliyuncs.com", "as dashscope.aliyuncs.com", "Qwen Code with an international DashScope key"},
	{"api.deepseek.com", "chat completions (/chat/completions)", "DeepSeek keys in any agent"},
	{"api.mistral.ai", "chat completions (/v1/chat/completions)", "Mistral keys in any agent"},
	{"api.groq.com", "chat completions (/openai/v1/chat/completions)", "Groq keys in any agent"},
}

// Hosts is the set of host names a run intercepts: ModelHosts, the
// configured ones and those given to -resolve, without ports, in lower
// case.
func Hosts(configured []string, resolve Resolve) []string {
	seen := map[string]bool{}
	var out []string
	add := func(h string) {
		h = hostName(h)
		if h != "" && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	for _, h := range ModelHosts {
		add(h.Name)
	}
	for _, h := range configured {
		add(h)
	}
	for h := range resolve {
		add(h)
	}
	return out
}

// hostName is h without a port or IPv6 brackets, in lower case.
func hostName(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if name, _, err := net.SplitHostPort(h); err == nil {
		h = name
	}
	return strings.Trim(h, "[]")
}

// hostRow is h's row in README.md's table of the model hosts.
func hostRow(h ModelHost) string {
	return "| " + h.Name + " | " + h.API + " | " + h.Agents + " |"
}
