package wireapi

// Name is a wire API as inspect, policy and replay records know it (a
// record's optional "api" field).
type Name string

// The APIs' names.
const (
	// Chat is OpenAI's chat completions: request.messages.
	Chat Name = "chat"
	// Responses is OpenAI's Responses API: request.input items.
	Responses Name = "responses"
	// Anthropic is Anthropic Messages (also served by llama.cpp, vLLM and
	// Ollama): request.messages with content blocks.
	Anthropic Name = "anthropic"
	// Ollama is Ollama's own chat API: request.messages, tool arguments as
	// objects, results named by tool_name.
	Ollama Name = "ollama"
	// OllamaGenerate is Ollama's generate API: a prompt, no history; only
	// its answer is watched.
	OllamaGenerate Name = "ollama_generate"
	// Gemini is Google's Gemini API (generateContent): request.contents
	// with parts, the model in the path.
	Gemini Name = "gemini"
	// CodeAssist is Gemini behind Google's Code Assist, as Gemini CLI
	// signed in with Google calls it: Gemini's request wrapped as
	// {model, project, request}, its answers as {response}.
	CodeAssist Name = "code_assist"
)

// Turns is how a history writes its turns.
type Turns uint8

const (
	// Messages: chat messages with roles, the system prompt one of them.
	Messages Turns = iota
	// Items: Responses items (messages, function calls and their outputs).
	Items
	// Blocks: Anthropic messages of content blocks (tool_use, tool_result).
	Blocks
	// Parts: Gemini contents of parts (text, functionCall,
	// functionResponse), the model's turns with role "model".
	Parts
)

// Stream is how a request asks to be answered with a stream.
type Stream uint8

const (
	// StreamMember: a "stream": true member asks for a stream.
	StreamMember Stream = iota
	// StreamUnlessFalse: every request is streamed unless "stream": false
	// (Ollama's native API).
	StreamUnlessFalse
	// StreamMethod: the method in the path says it (Gemini's
	// streamGenerateContent streams, generateContent does not).
	StreamMethod
)

// Framing is how a streamed answer's events are framed.
type Framing uint8

const (
	// SSE: text/event-stream events.
	SSE Framing = iota
	// NDJSON: one JSON object a line (application/x-ndjson).
	NDJSON
	// JSONArray: the events are the elements of one JSON array sent bit by
	// bit (application/json), or SSE events when the request's query asks
	// for alt=sse, as Gemini's clients do.
	JSONArray
)

// Path is one path an API answers.
type Path struct {
	// Pattern is the path: a leading "*" matches any prefix (/v1,
	// /openai/v1, a gateway's route), "{model}" one path segment that
	// names the model (no "/" or ":").
	Pattern string
	// Stream: the path alone asks for a stream (StreamMethod).
	Stream bool
}

// API is one wire API loopguard guards.
type API struct {
	Name Name
	// Label is its requests' metrics label (loopguard_requests_total's
	// path) and its timeline label.
	Label string
	// Paths are the request paths it answers (POST), in the order they
	// are tried; the first is where replay sends its records.
	Paths []Path
	// Wrap is the member that wraps the request ({"request": {...}}), ""
	// when it is not wrapped; AnswerWrap the member that wraps each answer
	// and each streamed chunk ({"response": {...}}).
	Wrap, AnswerWrap string
	// History is the member holding the conversation (inside Wrap's,
	// when set).
	History string
	// System is the member holding the system prompt (inside Wrap's), ""
	// when the history carries it as a message.
	System string
	// Turns is how the history writes its turns.
	Turns Turns
	// Marks are top-level members only this API's requests have, which
	// place a body that arrived without a path (replay records).
	Marks []string
	// Stream is how a request asks for a stream.
	Stream Stream
	// Framing is how its streams are framed.
	Framing Framing
	// Wire is the upstream family that serves it.
	Wire WireName
}

// APIs are the wire APIs loopguard guards, in the order their paths are
// tried: "/chat/completions" before anything that ends like it.
var APIs = [...]API{
	{Name: Chat, Label: "chat_completions", Wire: OpenAI,
		Paths: []Path{{Pattern: "/v1/chat/completions"}, {Pattern: "*/chat/completions"}}, History: "messages"},
	// /v1/responses under any prefix, or /responses alone, or the ChatGPT
	// Codex backend's: a longer path ending in /responses is some other
	// resource's.
	{Name: Responses, Label: "responses", Wire: OpenAI,
		Paths:   []Path{{Pattern: "*/v1/responses"}, {Pattern: "/responses"}, {Pattern: "*/backend-api/codex/responses"}},
		History: "input", System: "instructions", Turns: Items, Marks: []string{"previous_response_id", "instructions", "conversation"}},
	// Messages only as /v1/messages or /messages, so that OpenAI's
	// /v1/threads/{id}/messages is not mistaken for Anthropic's.
	{Name: Anthropic, Label: "messages", Wire: AnthropicWire,
		Paths:   []Path{{Pattern: "*/v1/messages"}, {Pattern: "/messages"}},
		History: "messages", System: "system", Turns: Blocks, Marks: []string{"system", "anthropic_version"}},
	{Name: Ollama, Label: "ollama_chat", Wire: OllamaWire, Stream: StreamUnlessFalse, Framing: NDJSON,
		Paths: []Path{{Pattern: "*/api/chat"}}, History: "messages", Marks: []string{"options", "keep_alive", "think"}},
	{Name: OllamaGenerate, Label: "ollama_generate", Wire: OllamaWire, Stream: StreamUnlessFalse, Framing: NDJSON,
		Paths: []Path{{Pattern: "*/api/generate"}}, History: "prompt"},
	// The model is in the path, under /v1beta/ or /v1/ (and Vertex AI's
	// /v1/projects/.../publishers/google/models/).
	{Name: Gemini, Label: "generate_content", Wire: GeminiWire, Stream: StreamMethod, Framing: JSONArray,
		Paths: []Path{{Pattern: "/v1beta/models/{model}:generateContent"},
			{Pattern: "*/models/{model}:streamGenerateContent", Stream: true}, {Pattern: "*/models/{model}:generateContent"}},
		History: "contents", System: "systemInstruction", Turns: Parts, Marks: []string{"contents", "systemInstruction"}},
	{Name: CodeAssist, Label: "code_assist", Wire: CodeAssistWire, Stream: StreamMethod, Framing: JSONArray,
		Paths: []Path{{Pattern: "*/v1internal:streamGenerateContent", Stream: true}, {Pattern: "*/v1internal:generateContent"}},
		Wrap:  "request", AnswerWrap: "response", History: "contents", System: "systemInstruction", Turns: Parts, Marks: []string{"request", "project"}},
}

// Lookup returns the API named n, nil if there is none.
func Lookup(n Name) *API {
	for i := range APIs {
		if APIs[i].Name == n {
			return &APIs[i]
		}
	}
	return nil
}

// Index returns a's position in APIs, for tables indexed by API.
func (a *API) Index() int {
	for i := range APIs {
		if &APIs[i] == a {
			return i
		}
	}
	return -1
}

// Route is what a request path says: its API, and whether the path alone
// asks for a stream.
type Route struct {
	API    *API
	Stream bool
}

// Match returns the route of a request path (no query; dot-segments
// resolved), Route{} when no API answers it. It allocates nothing.
func Match[P ~string | ~[]byte](path P) Route {
	for i := range APIs {
		for j := range patterns[i] {
			if ok, _, _ := matchPattern(&patterns[i][j], path); ok {
				return Route{API: &APIs[i], Stream: APIs[i].Paths[j].Stream}
			}
		}
	}
	return Route{}
}

// Model returns the model a request path names ({model}), "" when its
// API's paths name none.
func Model(path string) string {
	for i := range APIs {
		for j := range patterns[i] {
			if ok, from, to := matchPattern(&patterns[i][j], path); ok {
				return path[from:to]
			}
		}
	}
	return ""
}

// ReplayPath is where replay sends a record of a: its first path, with the
// prefix wildcard dropped and model in place of {model}.
func (a *API) ReplayPath(model string) string {
	p := a.Paths[0].Pattern
	if len(p) > 0 && p[0] == '*' {
		p = p[1:]
	}
	if before, after, ok := cut(p, "{model}"); ok {
		return before + model + after
	}
	return p
}

// pattern is a Path's Pattern taken apart: whether it starts with "*",
// and what comes before and after its "{model}" (all of it in before when
// it has none).
type pattern struct {
	anyPrefix, hasModel bool
	before, after       string
}

func parsePattern(p string) pattern {
	pt := pattern{anyPrefix: len(p) > 0 && p[0] == '*'}
	if pt.anyPrefix {
		p = p[1:]
	}
	pt.before, pt.after, pt.hasModel = cut(p, "{model}")
	return pt
}

// patterns are the APIs' Paths taken apart once: Match runs on every
// request, several times, and taking each pattern apart there made most of
// its cost.
var patterns = func() (ps [len(APIs)][]pattern) {
	for i := range APIs {
		for _, p := range APIs[i].Paths {
			ps[i] = append(ps[i], parsePattern(p.Pattern))
		}
	}
	return ps
}()

// match reports whether path fits pattern, and where in path the model it
// names lies (from == to when it names none).
func match[P ~string | ~[]byte](pattern string, path P) (ok bool, from, to int) {
	pt := parsePattern(pattern)
	return matchPattern(&pt, path)
}

// matchPattern is match for a pattern taken apart.
func matchPattern[P ~string | ~[]byte](pt *pattern, path P) (ok bool, from, to int) {
	anyPrefix, before, after := pt.anyPrefix, pt.before, pt.after
	if !pt.hasModel {
		if anyPrefix {
			return hasSuffix(path, before), 0, 0
		}
		return string(path) == before, 0, 0
	}
	if !hasSuffix(path, after) {
		return false, 0, 0
	}
	rest := path[:len(path)-len(after)]
	i := len(rest) - 1
	for i >= 0 && rest[i] != '/' {
		if rest[i] == ':' {
			return false, 0, 0
		}
		i--
	}
	if i < 0 || i == len(rest)-1 {
		return false, 0, 0
	}
	head := rest[:i+1]
	if anyPrefix && !hasSuffix(head, before) || !anyPrefix && string(head) != before {
		return false, 0, 0
	}
	return true, i + 1, len(rest)
}

func hasSuffix[P ~string | ~[]byte](s P, suffix string) bool {
	return len(s) >= len(suffix) && string(s[len(s)-len(suffix):]) == suffix
}

func cut(s, sep string) (before, after string, found bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

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
	// GeminiWire is Gemini's API with an API key.
	GeminiWire WireName = "gemini"
	// CodeAssistWire is Google's Code Assist, Gemini signed in with Google.
	CodeAssistWire WireName = "code_assist"
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
	// ServedByURL: the servers behind upstream.url serve this wire too
	// (vLLM, llama.cpp and Ollama answer Anthropic Messages), so
	// `loopguard run` takes the configuration's url for it when nothing
	// names its own; false: only its own base URL or the vendor's API.
	ServedByURL bool
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
	{Name: OpenAI, Public: "https://api.openai.com/v1", ServedByURL: true, Variables: []Variable{
		{Name: "OPENAI_BASE_URL", V1: true,
			Readers: "OpenAI SDKs (Python, Node, Go), Codex CLI, Qwen Code, LiteLLM (aider, mini-swe-agent), the AI SDK (opencode)"},
		{Name: "OPENAI_API_BASE", V1: true, Readers: "aider, LiteLLM, LangChain, openai-python before 1.0"},
		{Name: "LLM_BASE_URL", V1: true, OnlyIfSet: true, Readers: "OpenHands"},
	}},
	// Anthropic clients send anthropic-version on every request.
	{Name: AnthropicWire, Public: "https://api.anthropic.com/v1", Header: "anthropic-version", ServedByURL: true, Variables: []Variable{
		{Name: "ANTHROPIC_BASE_URL", Readers: "Claude Code, Anthropic SDKs, LiteLLM"},
		{Name: "ANTHROPIC_API_BASE", Readers: "aider, LiteLLM"},
	}},
	{Name: OllamaWire, Into: OpenAI, Variables: []Variable{
		{Name: "OLLAMA_HOST",
			Readers: "Ollama's Python and JS libraries, LangChain's ChatOllama, LlamaIndex, LiteLLM's ollama_chat/ models (aider)"},
	}},
	// Gemini CLI appends /v1beta/models/...; its API key rides in
	// x-goog-api-key (or ?key=).
	{Name: GeminiWire, Public: "https://generativelanguage.googleapis.com", Header: "x-goog-api-key",
		Prefixes: []string{"/v1beta/"}, Variables: []Variable{
			{Name: "GOOGLE_GEMINI_BASE_URL", Readers: "Gemini CLI (API-key mode)"},
		}},
	// Gemini CLI signed in with Google appends /v1internal:<method>.
	{Name: CodeAssistWire, Public: "https://cloudcode-pa.googleapis.com", Prefixes: []string{"/v1internal:"},
		Variables: []Variable{
			{Name: "CODE_ASSIST_ENDPOINT", Readers: "Gemini CLI (signed in with Google)"},
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
