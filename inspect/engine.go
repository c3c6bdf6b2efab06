package inspect

import "errors"

// ErrMalformed reports a request body that is not a chat request loopguard can read.
var ErrMalformed = errors.New("inspect: malformed chat request")

// Parse builds the trajectory of a chat-completions request body.
// TEMPORARY CONTRACT STUB: replaced by the real builder.
func Parse(body []byte) (*Trajectory, error) { return &Trajectory{}, nil }

// Engine runs the detectors with one configuration. It is safe for concurrent use.
type Engine struct{ cfg Config }

// NewEngine validates cfg and returns an engine.
func NewEngine(cfg Config) (*Engine, error) { return &Engine{cfg: cfg}, nil }

// Inspect runs every detector over t and aggregates their findings.
func (e *Engine) Inspect(t *Trajectory) Verdict { return Verdict{} }

// Brief renders the pattern for a log line: "bash(git status) x5".
func (v Verdict) Brief() string { return "" }

// Summary renders one sentence for people.
func (v Verdict) Summary() string { return "" }

// Full renders the evidence for the model.
func (v Verdict) Full() string { return "" }
