package judge

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Config is the [judge] table. The zero value is off; DefaultConfig holds
// the documented defaults.
type Config struct {
	// Enabled turns the judge on (default false).
	Enabled bool `toml:"enabled"`
	// URL is the OpenAI-compatible base URL of the judge, with or without
	// /v1, or the full /chat/completions URL; "" (default) asks the
	// session's own upstream ([upstream] url).
	URL string `toml:"url"`
	// Model is the model the judge asks for; required when enabled.
	Model string `toml:"model"`
	// APIKey, when set, is sent as a bearer token; "" sends none.
	APIKey string `toml:"api_key"`
	// MinTurns: a session is judged only once its history has this many
	// assistant turns (default 10).
	MinTurns int `toml:"min_turns"`
	// Every is how many turns pass between two checks of a session
	// (default 5).
	Every int `toml:"every"`
	// EveryDoubtful is the interval, in turns, after a warning or a
	// doubtful verdict (default 2): a stuck verdict whose confidence is at
	// least Doubt but too low to warn by itself.
	EveryDoubtful int `toml:"every_doubtful"`
	// Doubt is the lower bound of a doubtful confidence, in [0,1]
	// (default 0.5); the upper bound is the confidence at which the
	// aggregator warns on the judge alone ([detect] thresholds).
	Doubt float64 `toml:"doubt"`
	// SessionCallsPerMinute and SessionTokensPerMinute bound what one
	// session may spend (defaults 2 and 8000); CallsPerMinute and
	// TokensPerMinute bound all sessions together (defaults 60 and
	// 200000). A check over any budget is skipped and counted. Tokens are
	// the usage the endpoint reports, estimated before the call.
	SessionCallsPerMinute  int `toml:"session_calls_per_minute"`
	SessionTokensPerMinute int `toml:"session_tokens_per_minute"`
	CallsPerMinute         int `toml:"calls_per_minute"`
	TokensPerMinute        int `toml:"tokens_per_minute"`
	// Timeout bounds one call to the judge (default 20s).
	Timeout time.Duration `toml:"timeout"`
	// MaxDigestBytes bounds the trajectory digest sent (default 6000).
	MaxDigestBytes int `toml:"max_digest_bytes"`
	// MaxTokens bounds the judge's answer (default 256).
	MaxTokens int `toml:"max_tokens"`
	// Workers is how many calls may run at once (default 2), and Queue how
	// many checks may wait for one (default 64); a check finding the queue
	// full is dropped.
	Workers int `toml:"workers"`
	Queue   int `toml:"queue"`
}

// DefaultConfig returns the documented defaults, judge off.
func DefaultConfig() Config {
	return Config{
		MinTurns:               10,
		Every:                  5,
		EveryDoubtful:          2,
		Doubt:                  0.5,
		SessionCallsPerMinute:  2,
		SessionTokensPerMinute: 8000,
		CallsPerMinute:         60,
		TokensPerMinute:        200000,
		Timeout:                20 * time.Second,
		MaxDigestBytes:         6000,
		MaxTokens:              256,
		Workers:                2,
		Queue:                  64,
	}
}

// Validate reports every bad key at once, named as judge.<key>. A judge
// that is off is not checked beyond its types.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	bad := func(key, why string) { errs = append(errs, fmt.Errorf("judge.%s: %s", key, why)) }
	if c.Model == "" {
		bad("model", "required when the judge is enabled")
	}
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("url", fmt.Sprintf("%q is not an http(s) URL", c.URL))
		}
	}
	pos := func(key string, v int) {
		if v < 1 {
			bad(key, fmt.Sprintf("must be >= 1, got %d", v))
		}
	}
	pos("min_turns", c.MinTurns)
	pos("every", c.Every)
	pos("every_doubtful", c.EveryDoubtful)
	pos("session_calls_per_minute", c.SessionCallsPerMinute)
	pos("session_tokens_per_minute", c.SessionTokensPerMinute)
	pos("calls_per_minute", c.CallsPerMinute)
	pos("tokens_per_minute", c.TokensPerMinute)
	pos("max_tokens", c.MaxTokens)
	pos("workers", c.Workers)
	pos("queue", c.Queue)
	if c.MaxDigestBytes < 512 {
		bad("max_digest_bytes", fmt.Sprintf("must be >= 512, got %d", c.MaxDigestBytes))
	}
	if !(c.Doubt >= 0 && c.Doubt <= 1) {
		bad("doubt", fmt.Sprintf("must be in [0,1], got %v", c.Doubt))
	}
	if c.Timeout <= 0 {
		bad("timeout", fmt.Sprintf("must be > 0, got %v", c.Timeout))
	}
	return errors.Join(errs...)
}
