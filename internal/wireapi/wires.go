package wireapi

// WireName names an upstream family: the APIs that one base URL serves,
// which decides the upstream their requests go to.
type WireName string

// The wires' names; they are also the keys of upstream.urls.
const (
	// OpenAI is chat completions and Responses.
	OpenAI WireName = "openai"
	// AnthropicWire is Anthropic Messages.
	AnthropicWire WireName = "anthropic"
	// OllamaWire is Ollama's own API, whose server also answers /v1.
	OllamaWire WireName = "ollama"
)

// Wire is one upstream family.
type Wire struct {
	Name WireName
	// Public is the vendor's API, the upstream when nothing else names one;
	// "" when the wire has none of its own (Into's serves it).
	Public string
	// Into is the wire whose upstream an unset Public falls to, and which
	// this wire's base URL serves when none of that wire's variables names
	// one (Ollama's server answers /v1 too).
	Into WireName
	// Header is a request header only this wire's clients send: it routes
	// their calls beside the guarded paths (count_tokens, models) to the
	// wire's upstream. "" when none.
	Header string
	// Prefixes are the paths of the wire's other calls (Code Assist's
	// /v1internal:loadCodeAssist), routed to its upstream.
	Prefixes []string
	// Variables are the environment variables agents read its base URL
	// from, in the order their earlier values are taken as the upstream.
	Variables []Variable
}

// Variable is an environment variable that agents read a base URL from.
type Variable struct {
	Name string
	// V1 is true when readers expect the URL to end with /v1 (they append
	// /chat/completions); false when they append the version themselves.
	V1 bool
	// OnlyIfSet leaves the variable alone unless it was set: readers that
	// use it for any provider must not be turned to one wire.
	OnlyIfSet bool
	// Readers are the agents and libraries known to read it.
	Readers string
}

// Wires are the upstream families. Anthropic's Public ends with /v1 so that
// clients that put /v1 in their base URL (the AI SDK) and clients that do
// not (Claude Code, the Anthropic SDKs) both reach /v1/messages.
var Wires = [...]Wire{
	{Name: OpenAI, Public: "https://api.openai.com/v1", Variables: []Variable{
		{Name: "OPENAI_BASE_URL", V1: true,
			Readers: "OpenAI SDKs (Python, Node, Go), Codex CLI, Qwen Code, LiteLLM (aider, mini-swe-agent), the AI SDK (opencode)"},
		{Name: "OPENAI_API_BASE", V1: true, Readers: "aider, LiteLLM, LangChain, openai-python before 1.0"},
		{Name: "LLM_BASE_URL", V1: true, OnlyIfSet: true, Readers: "OpenHands"},
	}},
	// Anthropic clients send anthropic-version on every request.
	{Name: AnthropicWire, Public: "https://api.anthropic.com/v1", Header: "anthropic-version", Variables: []Variable{
		{Name: "ANTHROPIC_BASE_URL", Readers: "Claude Code, Anthropic SDKs, LiteLLM"},
		{Name: "ANTHROPIC_API_BASE", Readers: "aider, LiteLLM"},
	}},
	{Name: OllamaWire, Into: OpenAI, Variables: []Variable{
		{Name: "OLLAMA_HOST",
			Readers: "Ollama's Python and JS libraries, LangChain's ChatOllama, LlamaIndex, LiteLLM's ollama_chat/ models (aider)"},
	}},
}

// LookupWire returns the wire named n, nil if there is none.
func LookupWire(n WireName) *Wire {
	for i := range Wires {
		if Wires[i].Name == n {
			return &Wires[i]
		}
	}
	return nil
}

// Index returns w's position in Wires, for tables indexed by wire.
func (w *Wire) Index() int {
	for i := range Wires {
		if &Wires[i] == w {
			return i
		}
	}
	return -1
}

// WireOf returns the wire a request without a guarded path belongs to, by
// its header (has reports whether the request carries a header) or its
// path's prefix; nil when none claims it.
func WireOf[P ~string | ~[]byte](path P, has func(header string) bool) *Wire {
	for i := range Wires {
		w := &Wires[i]
		if w.Header != "" && has(w.Header) {
			return w
		}
		for _, p := range w.Prefixes {
			if len(path) >= len(p) && string(path[:len(p)]) == p {
				return w
			}
		}
	}
	return nil
}
