package proxy

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/judge"
	"github.com/loopguard/loopguard/policy"
)

// Config is loopguard's whole configuration. Its TOML form is documented key by
// key in config.example.toml; each section belongs to the package that uses it.
type Config struct {
	Server   ServerConfig   `toml:"server"`
	Upstream UpstreamConfig `toml:"upstream"`
	Stream   StreamConfig   `toml:"stream"`
	Log      LogConfig      `toml:"log"`
	Admin    AdminConfig    `toml:"admin"`
	Detect   inspect.Config `toml:"detect"`
	Policy   policy.Config  `toml:"policy"`
	Inject   inject.Config  `toml:"inject"`
	Judge    judge.Config   `toml:"judge"`
	Run      RunConfig      `toml:"run"`
}

// RunConfig is what `loopguard run` reads of the configuration; the proxy
// itself ignores it.
type RunConfig struct {
	// ExitOnStop makes `loopguard run` exit with a code of its own when
	// loopguard ended the run (LOOP_DETECTED or BUDGET_EXCEEDED) rather
	// than with the agent's, which is usually 0 (-exit-on-stop). Default
	// false.
	ExitOnStop bool `toml:"exit_on_stop"`
	// Hosts are more model hosts to intercept (names, no port or scheme)
	// besides intercept.ModelHosts: a gateway or a vendor loopguard does
	// not list. Empty (default): those only.
	Hosts []string `toml:"hosts"`
}

// ServerConfig is the listening side.
type ServerConfig struct {
	// Listen is the address to serve on. Default 127.0.0.1:8787.
	Listen string `toml:"listen"`
	// MaxBodyBytes caps a request body; larger bodies get 413. Default 64 MiB:
	// agents resend their whole history, and base64 images exceed fasthttp's 4 MiB.
	MaxBodyBytes int `toml:"max_body_bytes"`
	// MaxBodyMemory bounds the bytes that request bodies take together:
	// each body's bytes as they arrive, what decoding a compressed body
	// produces as it is produced, and each Responses WebSocket message as
	// it is read. A request whose next bytes do not fit beside those in
	// flight gets 503 with Retry-After. A body alone is always let in.
	// Default 256 MiB; 0: no bound.
	MaxBodyMemory int64 `toml:"max_body_memory"`
	// BodyTimeout is the longest wait for a request body's next bytes, as
	// nginx's client_body_timeout; past it the request gets 408. Default
	// 10s; 0: only read_timeout bounds a body.
	BodyTimeout time.Duration `toml:"body_timeout"`
	// MinBodyRate is the slowest a request body may arrive, in bytes per
	// second on average, once body_timeout has passed since it began (as
	// Apache's mod_reqtimeout MinRate): a client that trickles its body
	// gets 408 instead of holding a connection until read_timeout.
	// Default 1024; 0: no minimum.
	MinBodyRate int64 `toml:"min_body_rate"`
	// ReadTimeout bounds reading one request (headers and body). Default 60s.
	ReadTimeout time.Duration `toml:"read_timeout"`
	// IdleTimeout closes idle client keep-alive connections. Default 120s.
	IdleTimeout time.Duration `toml:"idle_timeout"`
	// SendTimeout is the longest a write to a client may wait for the
	// client to take bytes, as nginx's send_timeout: a client that stops
	// reading loses its connection (and its stream, whose upstream
	// connection closes) after this long. It bounds each wait, not the
	// whole answer, so a long stream to a client that reads is never cut.
	// Default 60s; 0: no bound.
	SendTimeout time.Duration `toml:"send_timeout"`
	// ShutdownGrace is how long SIGTERM waits for running streams. Default 30s.
	ShutdownGrace time.Duration `toml:"shutdown_grace"`
}

// UpstreamConfig is the LLM server loopguard forwards to.
type UpstreamConfig struct {
	// URL is the upstream base URL, with or without /v1
	// (http://127.0.0.1:8000, https://api.openai.com/v1). Required.
	URL string `toml:"url"`
	// AnthropicURL, when set, is the upstream of Anthropic Messages traffic
	// (requests that carry an anthropic-version header, as every Anthropic
	// client sends, or post to /v1/messages), for agents whose Anthropic
	// endpoint lives on another host than their OpenAI-style one. Same form
	// as URL; urls.anthropic says the same. Empty (default): URL serves
	// every wire API.
	AnthropicURL string `toml:"anthropic_url"`
	// URLs name the upstream of one wire's traffic each, keyed by the
	// wire's name ([upstream.urls] anthropic = "...", the wires of
	// internal/wireapi): its API's requests, those carrying its header or
	// with its path prefix. Same form as URL. A wire not named here goes
	// to URL.
	URLs map[string]string `toml:"urls"`
	// APIKey, when set, replaces the client's Authorization header with
	// "Bearer <APIKey>" on the Passthrough paths; a request to any other
	// path goes with the client's own credentials, or gets 401 without.
	// Empty: the client's header passes through everywhere.
	APIKey string `toml:"api_key"`
	// Passthrough are the paths APIKey serves: each matches the paths that
	// end with its segments, "*" matching any one; "guarded" stands for
	// the guarded APIs' paths. Default DefaultPassthrough: the guarded
	// APIs, the model listings and Ollama's read-only endpoints.
	Passthrough []string `toml:"passthrough"`
	// ConnectTimeout bounds dialling the upstream. Default 5s.
	ConnectTimeout time.Duration `toml:"connect_timeout"`
	// HeaderTimeout bounds the wait for the response headers, which for LLM
	// servers includes queueing and prompt processing. Default 10m.
	HeaderTimeout time.Duration `toml:"header_timeout"`
	// IdleTimeout is the longest silence allowed between two reads of a
	// response body (between stream events). Default 5m.
	IdleTimeout time.Duration `toml:"idle_timeout"`
	// RequestTimeout bounds a whole request, stream included. 0 (default): none.
	RequestTimeout time.Duration `toml:"request_timeout"`
	// MaxConns caps concurrent upstream connections. Default 4096.
	MaxConns int `toml:"max_conns"`
	// MaxIdleConnDuration closes pooled upstream connections idle this long.
	// Default 4s: below vLLM's 5s keep-alive, so a pooled socket is never
	// reused after the server has closed it (vLLM PR #18472).
	MaxIdleConnDuration time.Duration `toml:"max_idle_conn_duration"`
}

// StreamConfig tunes inline inspection of streamed answers.
type StreamConfig struct {
	// Cut ends degenerate streams. Default true.
	Cut bool `toml:"cut"`
	// Tail says what the client keeps of a degenerate stream: "keep"
	// (default: everything forwarded until the cut; nothing is held back) or
	// "trim" (content events wait until TrimWindow bytes follow them, so the
	// text can end where the repetition began; what waits is released when
	// the stream ends, fails or goes idle). Every guarded API.
	Tail string `toml:"tail"`
	// TrimWindow is the content bytes held back with tail = "trim". Default
	// 2048: about the text the detector needs to be sure of a loop.
	TrimWindow int `toml:"trim_window"`
	// FinishReason is the finish_reason of a cut chat answer: "stop"
	// (default) or "length". Responses and Anthropic answers end as their
	// streams do (response.completed; stop_reason "end_turn").
	FinishReason string `toml:"finish_reason"`
	// HoldToolCalls holds the tool-call deltas of a streamed answer until each
	// call is complete, while a call the ladder would end is in play (its
	// pattern's constraints sit one rung below terminate); such a call is
	// replaced by the LOOP_DETECTED answer instead of reaching the agent.
	// Held events are released when the stream ends, fails or goes idle.
	// Every guarded API. Default false: tool calls stream through as they
	// come.
	HoldToolCalls bool `toml:"hold_tool_calls"`
	// MaxEventBytes caps one SSE event; a longer one switches the stream to
	// raw pass-through without inspection. Default 16 MiB.
	MaxEventBytes int `toml:"max_event_bytes"`
}

// The values of StreamConfig.Tail.
const (
	TailKeep = "keep"
	TailTrim = "trim"
)

// LogConfig chooses the log output.
type LogConfig struct {
	// Format is "json" (default) or "console".
	Format string `toml:"format"`
	// Level is debug, info (default), warn or error.
	Level string `toml:"level"`
	// Content logs prompts and tool arguments. Default false: arguments can hold secrets.
	Content bool `toml:"content"`
}

// AdminConfig protects loopguard's own endpoints under /loopguard/.
type AdminConfig struct {
	// Token, when set, is required as "Authorization: Bearer <token>" by the
	// admin API and /metrics. Without it they answer only on loopback
	// listeners.
	Token string `toml:"token"`
	// Replica names this replica in the admin view that replicas sharing a
	// redis store show together. Empty: the host name and the listen port.
	Replica string `toml:"replica"`
	// Pprof serves Go's runtime profiles (net/http/pprof) under
	// /loopguard/debug/pprof/, under the same access rule as /metrics.
	// Default false: a profile costs CPU while it is taken and shows the
	// process's internals.
	Pprof bool `toml:"pprof"`
}

// DefaultConfig returns the configuration loopguard runs with when nothing is set.
func DefaultConfig() Config {
	return Config{
		Server: ServerConfig{
			Listen:        "127.0.0.1:8787",
			MaxBodyBytes:  64 << 20,
			MaxBodyMemory: 256 << 20,
			BodyTimeout:   10 * time.Second,
			MinBodyRate:   1 << 10,
			ReadTimeout:   60 * time.Second,
			IdleTimeout:   120 * time.Second,
			SendTimeout:   60 * time.Second,
			ShutdownGrace: 30 * time.Second,
		},
		Upstream: UpstreamConfig{
			ConnectTimeout:      5 * time.Second,
			HeaderTimeout:       10 * time.Minute,
			IdleTimeout:         5 * time.Minute,
			MaxConns:            4096,
			MaxIdleConnDuration: 4 * time.Second,
			Passthrough:         append([]string(nil), DefaultPassthrough...),
		},
		Stream: StreamConfig{
			Cut:           true,
			Tail:          TailKeep,
			TrimWindow:    2048,
			FinishReason:  "stop",
			MaxEventBytes: 16 << 20,
		},
		Log:    LogConfig{Format: "json", Level: "info"},
		Detect: inspect.DefaultConfig(),
		Policy: policy.DefaultConfig(),
		Inject: inject.DefaultConfig(),
		Judge:  judge.DefaultConfig(),
	}
}

// Validate reports every invalid key at once, each named by its TOML path.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if c.Upstream.URL == "" {
		bad("upstream.url", "is required (flag -upstream, env LOOPGUARD_UPSTREAM)")
	} else if u, err := url.Parse(c.Upstream.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("upstream.url", "%q is not an http(s) URL", c.Upstream.URL)
	}
	if c.Upstream.AnthropicURL != "" {
		if u, err := url.Parse(c.Upstream.AnthropicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("upstream.anthropic_url", "%q is not an http(s) URL", c.Upstream.AnthropicURL)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Upstream.URLs)) {
		v := c.Upstream.URLs[name]
		if wireapi.LookupWire(wireapi.WireName(name)) == nil {
			bad("upstream.urls."+name, "names no wire (%s)", wireNames())
		} else if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("upstream.urls."+name, "%q is not an http(s) URL", v)
		}
	}
	if c.Server.Listen == "" {
		bad("server.listen", "is empty")
	}
	if c.Server.MaxBodyBytes <= 0 {
		bad("server.max_body_bytes", "must be > 0, got %d", c.Server.MaxBodyBytes)
	}
	if c.Server.MaxBodyMemory < 0 {
		bad("server.max_body_memory", "must not be negative, got %d", c.Server.MaxBodyMemory)
	}
	if c.Server.MinBodyRate < 0 {
		bad("server.min_body_rate", "must not be negative, got %d", c.Server.MinBodyRate)
	}
	for key, d := range map[string]time.Duration{
		"server.read_timeout":             c.Server.ReadTimeout,
		"server.body_timeout":             c.Server.BodyTimeout,
		"server.idle_timeout":             c.Server.IdleTimeout,
		"server.send_timeout":             c.Server.SendTimeout,
		"server.shutdown_grace":           c.Server.ShutdownGrace,
		"upstream.connect_timeout":        c.Upstream.ConnectTimeout,
		"upstream.header_timeout":         c.Upstream.HeaderTimeout,
		"upstream.idle_timeout":           c.Upstream.IdleTimeout,
		"upstream.request_timeout":        c.Upstream.RequestTimeout,
		"upstream.max_idle_conn_duration": c.Upstream.MaxIdleConnDuration,
	} {
		if d < 0 {
			bad(key, "must not be negative, got %s", d)
		}
	}
	for _, p := range c.Upstream.Passthrough {
		if !strings.HasPrefix(p, "/") && p != guardedPaths {
			bad("upstream.passthrough", "%q is neither a path nor %q", p, guardedPaths)
		}
	}
	if c.Upstream.MaxConns <= 0 {
		bad("upstream.max_conns", "must be > 0, got %d", c.Upstream.MaxConns)
	}
	switch c.Stream.Tail {
	case TailKeep, TailTrim:
	default:
		bad("stream.tail", "must be keep or trim, got %q", c.Stream.Tail)
	}
	if c.Stream.Tail == TailTrim && c.Stream.TrimWindow <= 0 {
		bad("stream.trim_window", "must be > 0 with tail = \"trim\", got %d", c.Stream.TrimWindow)
	}
	switch c.Stream.FinishReason {
	case "stop", "length":
	default:
		bad("stream.finish_reason", "must be stop or length, got %q", c.Stream.FinishReason)
	}
	if c.Stream.MaxEventBytes < 4096 {
		bad("stream.max_event_bytes", "must be >= 4096, got %d", c.Stream.MaxEventBytes)
	}
	switch strings.ToLower(c.Log.Format) {
	case "json", "console":
	default:
		bad("log.format", "must be json or console, got %q", c.Log.Format)
	}
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	errs = append(errs, section("detect", c.Detect.Validate()), section("policy", c.Policy.Validate()),
		section("inject", c.Inject.Validate()), section("judge", c.Judge.Validate()))
	return errors.Join(errs...)
}

// section prefixes each line of a package's validation error with its TOML
// table, so every message names the full key.
func section(name string, err error) error {
	if err == nil {
		return nil
	}
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		l = strings.TrimPrefix(l, name+": ")
		if !strings.HasPrefix(l, name+".") {
			l = name + "." + l
		}
		lines[i] = l
	}
	return errors.New(strings.Join(lines, "\n"))
}

// WireURL returns the upstream base URL the configuration names for wire
// w's traffic, "" when URL serves it.
func (c UpstreamConfig) WireURL(w wireapi.WireName) string {
	if u := c.URLs[string(w)]; u != "" {
		return u
	}
	if w == wireapi.AnthropicWire {
		return c.AnthropicURL
	}
	return ""
}

// wireNames lists the wires' names, for an error.
func wireNames() string {
	names := make([]string, len(wireapi.Wires))
	for i := range wireapi.Wires {
		names[i] = string(wireapi.Wires[i].Name)
	}
	return strings.Join(names, ", ")
}
