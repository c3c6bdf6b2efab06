package agentrun

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/proxy"
)

// ChatGPTCodexBackend is where Codex CLI sends its turns when it is signed
// in with ChatGPT rather than with an API key: the vendor API refuses a
// ChatGPT token. loopguard maps a client's /v1/responses to its /responses
// (proxy: an upstream URL ending in /backend-api/codex takes no /v1).
const ChatGPTCodexBackend = "https://chatgpt.com/backend-api/codex"

// Choice is the upstream picked for one wire format, and why.
type Choice struct {
	URL    string
	Reason string
}

// ChooseUpstreams picks each wire format's upstream: -upstream for all,
// else what the base-URL variables held (OLLAMA_HOST for OpenAI traffic when
// no OpenAI variable names one: Ollama answers /v1 and its own /api alike),
// else the configuration's (urls.<wire> or anthropic_url, then url for the
// wires an OpenAI-style server also serves), else the vendor's public API. One more step is for Codex: a command that is Codex signed in
// with ChatGPT, with no API key configured, gets the ChatGPT Codex backend
// for OpenAI traffic unless -upstream or a base-URL variable named another.
// The configuration file comes after it: it serves every agent, and a
// ChatGPT token is good at the ChatGPT backend only.
func ChooseUpstreams(o Options, cfg proxy.UpstreamConfig) map[Wire]Choice {
	getenv := lookupEnv(o.Env)
	fromEnv := Upstreams(getenv)
	var codex string
	if len(o.Command) > 0 && cfg.APIKey == "" {
		codex = codexChatGPT(o.Command[0], getenv)
	}
	out := map[Wire]Choice{}
	for _, w := range upstreamWires {
		configured, cfgKey := cfg.URL, "upstream.url"
		if !wireapi.LookupWire(w).ServedByURL {
			configured = ""
		}
		if u := cfg.WireURL(w); u != "" {
			configured, cfgKey = u, "upstream.urls."+string(w)
			if w == wireapi.AnthropicWire && cfg.URLs[string(w)] == "" {
				cfgKey = "upstream.anthropic_url"
			}
		}
		envWire := w
		for _, into := range wireapi.Wires {
			if fromEnv[w] == "" && into.Into == w && fromEnv[into.Name] != "" {
				envWire = into.Name // Ollama answers /v1 and its own /api alike
			}
		}
		switch {
		case o.Upstream != "":
			out[w] = Choice{o.Upstream, "-upstream"}
		case fromEnv[envWire] != "":
			out[w] = Choice{fromEnv[envWire], envName(envWire, getenv) + " named it"}
		case w == wireapi.OpenAI && codex != "":
			out[w] = Choice{ChatGPTCodexBackend, codex}
		case configured != "":
			out[w] = Choice{configured, "the configuration's " + cfgKey}
		default:
			out[w] = Choice{PublicUpstream[w], "the vendor's API (nothing named another)"}
		}
	}
	return out
}

// envName is the base-URL variable that Upstreams took w's URL from.
func envName(w Wire, getenv func(string) string) string {
	for _, v := range Variables {
		if v.Wire == w && strings.TrimSpace(getenv(v.Name)) != "" {
			return v.Name
		}
	}
	return "the environment"
}

// codexAuth is what loopguard reads of Codex's auth.json: how it signed in,
// never the tokens themselves beyond their presence.
type codexAuth struct {
	AuthMode string  `json:"auth_mode"`
	APIKey   *string `json:"OPENAI_API_KEY"`
	Tokens   *struct {
		AccessToken string `json:"access_token"`
	} `json:"tokens"`
}

// codexChatGPT returns why command, when it is Codex CLI signed in with
// ChatGPT and with no API key of its own, should reach the ChatGPT Codex
// backend; "" when it should not. Codex keeps its sign-in in
// $CODEX_HOME/auth.json (default ~/.codex/auth.json). CODEX_API_KEY in the
// environment, or an API key in auth.json, makes Codex use the key and the
// vendor API; OPENAI_API_KEY alone does not (Codex signed in with ChatGPT
// ignores it), so a key left in the shell for other tools changes nothing.
func codexChatGPT(command string, getenv func(string) string) string {
	if filepath.Base(command) != "codex" || strings.TrimSpace(getenv("CODEX_API_KEY")) != "" {
		return ""
	}
	home := getenv("CODEX_HOME")
	if home == "" {
		h := getenv("HOME")
		if h == "" {
			h, _ = os.UserHomeDir()
		}
		if h == "" {
			return ""
		}
		home = filepath.Join(h, ".codex")
	}
	path := filepath.Join(home, "auth.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var a codexAuth
	if json.Unmarshal(b, &a) != nil {
		return ""
	}
	mode := strings.ToLower(a.AuthMode)
	if !strings.HasPrefix(mode, "chatgpt") || a.Tokens == nil || a.Tokens.AccessToken == "" ||
		a.APIKey != nil && *a.APIKey != "" {
		return ""
	}
	return "Codex is signed in with ChatGPT (" + path + ") and no API key is configured"
}
