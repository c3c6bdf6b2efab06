package agentrun

import (
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/loopguard/loopguard/internal/wireapi"
)

// Wire is the wire an agent speaks to its model, which decides the
// upstream its requests go to: one of the registry's (internal/wireapi).
type Wire = wireapi.WireName

// PublicUpstream is each wire's vendor API, the upstream when nothing else
// names one (internal/wireapi: Wire.Public).
var PublicUpstream = func() map[Wire]string {
	m := map[Wire]string{}
	for _, w := range wireapi.Wires {
		if w.Public != "" {
			m[w.Name] = w.Public
		}
	}
	return m
}()

// Variable is an environment variable that agents read their base URL from.
type Variable struct {
	wireapi.Variable
	// Wire is the wire whose base URL it holds.
	Wire Wire
}

// Variables are the base-URL variables run points at loopguard, in the
// order their earlier values are taken as the upstream: the registry's
// wires' (internal/wireapi).
var Variables = func() []Variable {
	var vs []Variable
	for _, w := range wireapi.Wires {
		for _, v := range w.Variables {
			vs = append(vs, Variable{Variable: v, Wire: w.Name})
		}
	}
	return vs
}()

// upstreamWires are the wires with an upstream of their own, in the
// registry's order: the wires run picks an upstream for.
var upstreamWires = func() []Wire {
	var ws []Wire
	for _, w := range wireapi.Wires {
		if w.Public != "" {
			ws = append(ws, w.Name)
		}
	}
	return ws
}()

// Upstreams returns, per wire format, the first base URL the variables held
// before run changed them; a wire format none of them set is absent.
func Upstreams(getenv func(string) string) map[Wire]string {
	ups := map[Wire]string{}
	for _, v := range Variables {
		if _, ok := ups[v.Wire]; ok {
			continue
		}
		if u := strings.TrimSpace(getenv(v.Name)); u != "" {
			if v.Wire == wireapi.OllamaWire {
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
func Environ(env []string, base string) []string {
	return environ(env, base, func(Variable) bool { return true })
}

// EnvironSet is Environ for an intercepted run: it points at base the
// base-URL variables that env sets, and those of the wires whose vendor
// host is not intercepted (intercepted says which are); the others stay
// unset, so that each agent goes where it goes by itself, intercepted.
func EnvironSet(env []string, base string, intercepted func(host string) bool) []string {
	return environ(env, base, func(v Variable) bool {
		u, err := url.Parse(PublicUpstream[v.Wire])
		return err == nil && u.Hostname() != "" && !intercepted(u.Hostname())
	})
}

// environ points at base the base-URL variables env sets, and adds those
// that unset says to.
func environ(env []string, base string, unset func(Variable) bool) []string {
	base = strings.TrimRight(base, "/")
	out := make([]string, 0, len(env)+len(Variables))
	set := map[string]bool{}
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		if v, ok := variable(name); ok && (strings.TrimSpace(val) != "" || unset(v)) {
			set[name] = true
			kv = name + "=" + v.url(base)
		}
		out = append(out, kv)
	}
	for _, v := range Variables {
		if !set[v.Name] && !v.OnlyIfSet && unset(v) {
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
