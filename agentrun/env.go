package agentrun

import (
	"net"
	"path/filepath"
	"strings"
)

// Wire is the wire format an agent speaks to its model, which decides the
// upstream its requests go to.
type Wire string

// The wire formats with a base-URL variable of their own.
const (
	// OpenAI is chat completions and Responses.
	OpenAI Wire = "openai"
	// Anthropic is Anthropic Messages.
	Anthropic Wire = "anthropic"
	// Ollama is Ollama's own API (/api/chat), whose server also answers
	// /v1: its upstream is the OpenAI wire's when nothing else names one.
	Ollama Wire = "ollama"
)

// PublicUpstream is each wire format's vendor API, the upstream when nothing
// else names one. Anthropic's ends with /v1 so that clients that put /v1 in
// their base URL (the AI SDK) and clients that do not (Claude Code, the
// Anthropic SDKs) both reach /v1/messages.
var PublicUpstream = map[Wire]string{
	OpenAI:    "https://api.openai.com/v1",
	Anthropic: "https://api.anthropic.com/v1",
}

// Variable is an environment variable that agents read their base URL from.
type Variable struct {
	Name string
	Wire Wire
	// V1 is true when readers expect the URL to end with /v1 (they append
	// /chat/completions); false when they append /v1/messages themselves.
	V1 bool
	// OnlyIfSet leaves the variable alone unless it was set: readers that
	// use it for any provider must not be turned to one wire format.
	OnlyIfSet bool
	// Readers are the agents and libraries known to read it.
	Readers string
}

// Variables are the base-URL variables run points at loopguard, in the
// order their earlier values are taken as the upstream.
var Variables = []Variable{
	{Name: "OPENAI_BASE_URL", Wire: OpenAI, V1: true,
		Readers: "OpenAI SDKs (Python, Node, Go), Codex CLI, Qwen Code, LiteLLM (aider, mini-swe-agent), the AI SDK (opencode)"},
	{Name: "OPENAI_API_BASE", Wire: OpenAI, V1: true, Readers: "aider, LiteLLM, LangChain, openai-python before 1.0"},
	{Name: "LLM_BASE_URL", Wire: OpenAI, V1: true, OnlyIfSet: true, Readers: "OpenHands"},
	{Name: "ANTHROPIC_BASE_URL", Wire: Anthropic, Readers: "Claude Code, Anthropic SDKs, LiteLLM"},
	{Name: "ANTHROPIC_API_BASE", Wire: Anthropic, Readers: "aider, LiteLLM"},
	{Name: "OLLAMA_HOST", Wire: Ollama,
		Readers: "Ollama's Python and JS libraries, LangChain's ChatOllama, LlamaIndex, LiteLLM's ollama_chat/ models (aider)"},
}

// Upstreams returns, per wire format, the first base URL the variables held
// before run changed them; a wire format none of them set is absent.
func Upstreams(getenv func(string) string) map[Wire]string {
	ups := map[Wire]string{}
	for _, v := range Variables {
		if _, ok := ups[v.Wire]; ok {
			continue
		}
		if u := strings.TrimSpace(getenv(v.Name)); u != "" {
			if v.Wire == Ollama {
				u = ollamaURL(u)
			}
			ups[v.Wire] = u
		}
	}
	return ups
}

// Environ returns env (KEY=VALUE entries, as os.Environ) with every base-URL
// variable pointed at base, the session's URL without /v1
// (http://127.0.0.1:PORT/s/<id>). Everything else, keys included, passes
// through untouched.
func Environ(env []string, base string) []string { return environ(env, base, true) }

// EnvironSet is Environ for the base-URL variables that env sets only: an
// intercepted run leaves the others unset, so that each agent goes where
// it goes by itself, intercepted.
func EnvironSet(env []string, base string) []string { return environ(env, base, false) }

func environ(env []string, base string, all bool) []string {
	base = strings.TrimRight(base, "/")
	out := make([]string, 0, len(env)+len(Variables))
	set := map[string]bool{}
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		if v, ok := variable(name); ok && (all || strings.TrimSpace(val) != "") {
			set[name] = true
			kv = name + "=" + v.url(base)
		}
		out = append(out, kv)
	}
	for _, v := range Variables {
		if all && !set[v.Name] && !v.OnlyIfSet {
			out = append(out, v.Name+"="+v.url(base))
		}
	}
	return out
}

// ollamaURL is the URL an OLLAMA_HOST value names, read as Ollama's
// clients read it: a scheme, host or port left out is http, 127.0.0.1
// (for 0.0.0.0 or none) and 11434 (443 for https).
func ollamaURL(v string) string {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		scheme, rest = "http", v
	}
	host, path, _ := strings.Cut(rest, "/")
	if h, _, err := net.SplitHostPort(host); err != nil {
		port := "11434"
		if scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(strings.Trim(host, "[]"), port)
	} else if h == "" || h == "0.0.0.0" {
		host = "127.0.0.1" + host[len(h):]
	}
	if strings.HasPrefix(host, "0.0.0.0:") || strings.HasPrefix(host, ":") {
		host = "127.0.0.1" + host[strings.LastIndexByte(host, ':'):]
	}
	if path = strings.TrimRight(path, "/"); path != "" {
		return scheme + "://" + host + "/" + path
	}
	return scheme + "://" + host
}

func variable(name string) (Variable, bool) {
	for _, v := range Variables {
		if v.Name == name {
			return v, true
		}
	}
	return Variable{}, false
}

func (v Variable) url(base string) string {
	if v.V1 {
		return base + "/v1"
	}
	return base
}

// Args returns the command line to run: command itself, or, for agents that
// take their base URL from a documented option rather than the environment,
// command with that option added. Codex CLI reads its base URL from the
// config key openai_base_url (recent versions ignore OPENAI_BASE_URL), which
// `-c key=value` sets for one run without touching config.toml; an
// openai_base_url the user passes later on the line still wins. base is as
// for Environ.
func Args(command []string, base string) []string {
	if len(command) == 0 || filepath.Base(command[0]) != "codex" {
		return command
	}
	opt := `openai_base_url="` + strings.TrimRight(base, "/") + `/v1"`
	return append([]string{command[0], "-c", opt}, command[1:]...)
}

// configFileAgents read their base URL only from their own config file;
// the hint is the setting to add there, %s standing for the session's URL
// without /v1.
var configFileAgents = map[string]string{
	"opencode": `opencode reads its base URL from opencode.json; set on the provider: "options": {"baseURL": "%s/v1"}`,
	"crush":    `crush reads its base URL from crush.json; set on the provider: "base_url": "%s/v1"`,
	// pi hands its Anthropic and ChatGPT (openai-codex) providers' base
	// URL to clients that add /v1 themselves.
	"pi": `pi reads its base URL from ~/.pi/agent/models.json; set on the provider: "baseUrl": "%s/v1" ` +
		`(OpenAI-compatible APIs) or "%s" (anthropic-messages, openai-codex-responses)`,
	"cn": `Continue (cn) reads its base URL from config.yaml; set on the model: apiBase: %s/v1`,
}

// Hint returns the setting to add for command when it is an agent that reads
// its base URL only from its config file, "" otherwise. base is as for
// Environ. In an intercepted run the agent's sign-ins and the providers on
// the model hosts are guarded as they are: the hint is for a provider of
// the user's own elsewhere.
func Hint(command, base string, intercepting bool) string {
	h, ok := configFileAgents[filepath.Base(command)]
	if !ok {
		return ""
	}
	h = strings.ReplaceAll(h, "%s", strings.TrimRight(base, "/"))
	if intercepting {
		name, _, _ := strings.Cut(h, " reads ")
		return "interception guards " + name + " on the model hosts; for a provider elsewhere, " + h
	}
	return strings.Replace(h, "; set", "; to guard it, set", 1)
}
