package policy

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"
)

// Mode says how much loopguard may do to a request. The strings are part of
// the external contract: they are config values and the values of the
// X-Loopguard-Mode request header.
type Mode string

// The modes of docs/design.md section 4.
const (
	// ModeEnforce detects loops and acts on them (the default).
	ModeEnforce Mode = "enforce"
	// ModeShadow detects, logs and counts, and changes nothing: neither the
	// request nor the session state.
	ModeShadow Mode = "shadow"
	// ModeOff does no loop work at all.
	ModeOff Mode = "off"
)

// ParseMode parses a config value or an X-Loopguard-Mode header value. It
// accepts the three mode names in any case, with surrounding spaces; ok is
// false for anything else, including "".
func ParseMode(s string) (m Mode, ok bool) {
	switch Mode(strings.ToLower(strings.TrimSpace(s))) {
	case ModeEnforce:
		return ModeEnforce, true
	case ModeShadow:
		return ModeShadow, true
	case ModeOff:
		return ModeOff, true
	}
	return "", false
}

// rank orders modes by how much they do, so that overrides can only lower it.
func (m Mode) rank() int {
	switch m {
	case ModeOff:
		return 0
	case ModeShadow:
		return 1
	}
	return 2 // enforce, and "" which means the default
}

// Action is what policy decided to do with one request. The strings are part
// of the external contract: they are the values of the X-Loopguard-Action
// response header, of ladder entries in the config and of metrics labels.
type Action string

// The actions of docs/design.md section 4.
const (
	None      Action = "none"      // pass the request through unchanged
	Warn      Action = "warn"      // add a short notice naming the pattern
	Constrain Action = "constrain" // add a <loop-recovery> block with constraints
	Reset     Action = "reset"     // constrain and collapse the looping span of the history
	Terminate Action = "terminate" // answer LOOP_DETECTED without calling the upstream
	Shadow    Action = "shadow"    // shadow mode: Decision.Would holds what enforce would do
)

// ladderAction reports whether a may appear in Config.Ladder.
func ladderAction(a Action) bool {
	switch a {
	case Warn, Constrain, Reset, Terminate:
		return true
	}
	return false
}

// Store kinds accepted by Config.Store.
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

// Config is the [policy] section of the configuration. Start from
// DefaultConfig; New also fills zero fields with their defaults, so a zero
// Config works except for ResetOnConstrain, whose default is true.
type Config struct {
	// Mode is enforce, shadow or off. Empty means enforce.
	Mode Mode `toml:"mode"`
	// AllowClientOverride lets a client send X-Loopguard-Mode: shadow|off
	// for one request. Default false: a client cannot turn loopguard down.
	AllowClientOverride bool `toml:"allow_client_override"`
	// SessionHeader is the request header carrying the session id, read
	// before SessionHeaders. Default "X-Session-ID"; empty means the default.
	SessionHeader string `toml:"session_header"`
	// SessionHeaders are the session headers real agents send, read in order
	// after SessionHeader; the first one present with a value names the
	// session. Default DefaultSessionHeaders(); empty means the default.
	SessionHeaders []string `toml:"session_headers"`
	// Ladder is the escalation ladder applied per loop pattern, one step per
	// continued loop. Values: warn, constrain, reset, terminate.
	// Default ["warn", "constrain", "terminate"]; empty means the default.
	Ladder []Action `toml:"ladder"`
	// ResetOnConstrain makes constrain also collapse the looping span of the
	// history, as reset does. DefaultConfig sets it to true.
	ResetOnConstrain bool `toml:"reset_on_constrain"`

	// Store is memory (default, one process) or redis (shared by replicas).
	Store string `toml:"store"`
	// RedisURL addresses the redis server when Store is redis, e.g.
	// "redis://127.0.0.1:6379/0". Required with the redis store.
	RedisURL string `toml:"redis_url"`
	// RedisAddrs are further host:port addresses: with them RedisURL's host
	// and these are the seed nodes of a Redis Cluster, or the Sentinels
	// when RedisMaster is set. The URL's scheme (rediss: TLS), user,
	// password and db apply to every node.
	RedisAddrs []string `toml:"redis_addrs"`
	// RedisMaster is the master name that the Sentinels at RedisURL and
	// RedisAddrs know; set, loopguard follows failovers.
	RedisMaster string `toml:"redis_master"`
	// RedisPasswordEnv names the environment variable that holds the redis
	// password, so that it stays out of the config file; it replaces a
	// password in RedisURL. The variable must be set when this is.
	RedisPasswordEnv string `toml:"redis_password_env"`
	// MaxSessions bounds the memory store; the least recently used session
	// is evicted beyond it. Default 10000.
	MaxSessions int `toml:"max_sessions"`
	// TTL is how long an idle session's state is kept. Default 24h.
	TTL time.Duration `toml:"ttl"`
	// StoreTimeout bounds every store call; on expiry policy fails open.
	// Default 50ms.
	StoreTimeout time.Duration `toml:"store_timeout"`

	// GlobalSessions is how many distinct sessions looping on the same
	// pattern within GlobalWindow make one cross-session incident (redis
	// store only). Default 5.
	GlobalSessions int `toml:"global_sessions"`
	// GlobalWindow is the window of GlobalSessions. Default 10m.
	GlobalWindow time.Duration `toml:"global_window"`

	// SessionMaxTokens bounds the tokens the upstream reports over a
	// session (prompt and completion of every answer, streamed ones
	// included when the upstream reports their usage); SessionMaxTurns its
	// model calls. At BudgetWarnPercent of either the next request carries
	// a warning; once either is used up, the next request is answered
	// BUDGET_EXCEEDED without calling the upstream. 0: no bound (default).
	SessionMaxTokens int64 `toml:"session_max_tokens"`
	SessionMaxTurns  int   `toml:"session_max_turns"`
	// Models overrides the session budget for models matching a glob
	// (path.Match syntax); when several match, the longest wins. Zero
	// fields inherit; a negative one turns that bound off.
	Models map[string]Budget `toml:"models"`
}

// Defaults of Config.
const (
	DefaultSessionHeader  = "X-Session-ID"
	DefaultMaxSessions    = 10000
	DefaultTTL            = 24 * time.Hour
	DefaultStoreTimeout   = 50 * time.Millisecond
	DefaultGlobalSessions = 5
	DefaultGlobalWindow   = 10 * time.Minute
)

// DefaultSessionHeaders are the headers that coding agents send with one
// value per run, as seen on the wire: Codex CLI sends session-id (older
// versions and pi session_id), Claude Code x-claude-code-session-id (since
// v2.1.86; the same id is in metadata.user_id), opencode x-session-affinity
// to custom providers (and X-Session-ID since v1.17, x-opencode-session to
// its own), which clients of OpenCode Go are configured to send too.
func DefaultSessionHeaders() []string {
	return []string{"session-id", "session_id", "x-claude-code-session-id", "x-session-affinity", "x-opencode-session"}
}

// DefaultLadder is the ladder used when Config.Ladder is empty.
func DefaultLadder() []Action { return []Action{Warn, Constrain, Terminate} }

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Mode:             ModeEnforce,
		SessionHeader:    DefaultSessionHeader,
		SessionHeaders:   DefaultSessionHeaders(),
		Ladder:           DefaultLadder(),
		ResetOnConstrain: true,
		Store:            StoreMemory,
		MaxSessions:      DefaultMaxSessions,
		TTL:              DefaultTTL,
		StoreTimeout:     DefaultStoreTimeout,
		GlobalSessions:   DefaultGlobalSessions,
		GlobalWindow:     DefaultGlobalWindow,
	}
}

// withDefaults fills zero fields. It never changes ResetOnConstrain, whose
// zero value is a legitimate choice.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Mode == "" {
		c.Mode = d.Mode
	}
	if c.SessionHeader == "" {
		c.SessionHeader = d.SessionHeader
	}
	if len(c.SessionHeaders) == 0 {
		c.SessionHeaders = d.SessionHeaders
	} else {
		c.SessionHeaders = append([]string(nil), c.SessionHeaders...) // the caller keeps its slice
	}
	if len(c.Ladder) == 0 {
		c.Ladder = d.Ladder
	} else {
		c.Ladder = append([]Action(nil), c.Ladder...) // the caller keeps its slice
	}
	if c.Store == "" {
		c.Store = d.Store
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.TTL == 0 {
		c.TTL = d.TTL
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = d.StoreTimeout
	}
	if c.GlobalSessions == 0 {
		c.GlobalSessions = d.GlobalSessions
	}
	if c.GlobalWindow == 0 {
		c.GlobalWindow = d.GlobalWindow
	}
	return c
}

// Validate reports every invalid key at once, each error naming its key.
// Zero values are valid: they mean the default.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("policy: %s: "+format, append([]any{key}, a...)...))
	}
	if c.Mode != "" {
		if _, ok := ParseMode(string(c.Mode)); !ok {
			bad("mode", "%q is not enforce, shadow or off", c.Mode)
		}
	}
	if c.SessionHeader != "" && !validHeaderName(c.SessionHeader) {
		bad("session_header", "%q is not a valid header name", c.SessionHeader)
	}
	for i, h := range c.SessionHeaders {
		if !validHeaderName(h) {
			bad(fmt.Sprintf("session_headers[%d]", i), "%q is not a valid header name", h)
		}
	}
	seenTerminate := false
	for i, a := range c.Ladder {
		key := fmt.Sprintf("ladder[%d]", i)
		switch {
		case !ladderAction(a):
			bad(key, "%q is not warn, constrain, reset or terminate", a)
		case seenTerminate:
			// terminate ends the session's loop; a later rung is unreachable.
			bad(key, "%q follows terminate and can never apply", a)
		}
		if a == Terminate {
			seenTerminate = true
		}
	}
	switch c.Store {
	case "", StoreMemory:
	case StoreRedis:
		if c.RedisURL == "" {
			bad("redis_url", "required when store is redis")
		}
	default:
		bad("store", "%q is not memory or redis", c.Store)
	}
	if c.RedisURL != "" {
		if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			bad("redis_url", "%q is not a redis://, rediss:// or unix:// URL", redactURL(c.RedisURL))
		}
	}
	if c.MaxSessions < 0 {
		bad("max_sessions", "%d is negative", c.MaxSessions)
	}
	if c.TTL < 0 {
		bad("ttl", "%v is negative", c.TTL)
	}
	if c.StoreTimeout < 0 {
		bad("store_timeout", "%v is negative", c.StoreTimeout)
	}
	if c.GlobalSessions < 0 {
		bad("global_sessions", "%d is negative", c.GlobalSessions)
	}
	if c.GlobalWindow < 0 {
		bad("global_window", "%v is negative", c.GlobalWindow)
	}
	if c.SessionMaxTokens < 0 {
		bad("session_max_tokens", "%d is negative", c.SessionMaxTokens)
	}
	if c.SessionMaxTurns < 0 {
		bad("session_max_turns", "%d is negative", c.SessionMaxTurns)
	}
	for glob := range c.Models {
		if _, err := path.Match(glob, ""); err != nil {
			bad("models", "model pattern %q: %v", glob, err)
		}
	}
	return errors.Join(errs...)
}

// redactURL drops the password so that config errors never print secrets.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparsable>"
	}
	return u.Redacted()
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}
