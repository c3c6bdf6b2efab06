package proxy

import (
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/judge"
	"github.com/loopguard/loopguard/policy"
)

// ChatEvent is what the proxy did with one request of a guarded API (chat
// completions, the Responses API, Anthropic Messages). It is handed to the
// ChatDone hook once the answer has ended.
type ChatEvent struct {
	Session  string
	Model    string
	Stream   bool
	Verdict  inspect.Verdict
	Decision policy.Decision
	// FailOpen names the stage that failed and let the request through
	// unchanged (an observe.Stage); "" when nothing failed.
	FailOpen string
	// Terminated is true when loopguard answered LOOP_DETECTED itself.
	Terminated bool
	// Status is the HTTP status the client got.
	Status int
	// Cut is the degeneration that ended the answer early, nil if none;
	// CutOffset is the byte offset in the answer's text where it began.
	Cut         *inspect.Detection
	CutOffset   int64
	TokensSaved int
	// Start is when the request arrived; Duration is until the answer ended.
	Start    time.Time
	Duration time.Duration
	// JudgeDue: a judge check of this turn was due; it is queued once the
	// request is forwarded, and its outcome, for step JudgeStep of the
	// session, goes to the WithJudgeDone hook.
	JudgeDue  bool
	JudgeStep int
}

// Option configures a Server.
type Option func(*Server)

// WithChatDone registers fn to be called once per request of a guarded API
// after its answer ended, from the goroutine that served it. fn must not
// block: it runs on the request path. The event must not be retained.
func WithChatDone(fn func(*ChatEvent)) Option {
	return func(s *Server) { s.chatDone = fn }
}

// WithJudgeDone registers fn to be called with the outcome of each judge
// check, once a verdict has been stored for the session's next request
// (or the check failed open). It runs on the judge's workers, or on the
// request path for a check skipped over budget; fn must not block for long.
// Replay uses it to let a due check finish before the session's next
// record, so that a verdict lands on the same turn on every run.
func WithJudgeDone(fn func(judge.Result)) Option {
	return func(s *Server) { s.judgeDone = fn }
}
