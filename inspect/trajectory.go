package inspect

import "sync/atomic"

// Trajectory is the agent's work as a chat request's history shows it: the
// ordered assistant turns with the tool results paired to their calls.
//
// Strings in a Trajectory are copies, not views into the request body, so a
// Trajectory may outlive the body it was built from.
type Trajectory struct {
	Model string
	// Steps are the assistant turns in order.
	Steps []Step
	// Start is the index of the first step after the last genuine human
	// message; detection windows begin there. Automated user-role messages
	// ("please continue", condensation notices) do not move it.
	Start int
	// Messages is the number of messages in the request.
	Messages int
	// Layout locates the messages in the body Parse read (chat completions
	// only), so that a rewrite of that same body need not search for them.
	Layout Layout

	// churn marks where the history shows the client cutting its own
	// context: a condensation or trimming notice, a context-length error
	// sent back in user role (see churnNotice).
	churn churnMarks

	// meta is the metadata-argument list the fingerprints were made with.
	meta []string
	// lease is the session cache's entry whose steps Steps are, until
	// Release.
	lease *cacheEntry
	// reach is the reach of the engine that parsed t with a session
	// cache (see Engine.reach): Inspect need not walk the steps again.
	reach reachMemo
}

// Release tells the session cache that t is no longer read: the next turn
// of t's session may then extend t's steps in place instead of copying
// them (see SessionCache). Neither t nor anything it holds may be read
// after Release, which is to be called once. A Trajectory not made by
// Engine.ParseSession needs none; an unreleased one costs its session's
// next turn a copy of its steps.
func (t *Trajectory) Release() {
	if t == nil || t.lease == nil {
		return
	}
	t.lease.cache.unlease(t.lease)
	t.lease = nil
}

// Layout holds byte offsets [start, end) into a chat-completions body: of
// its messages array and of the array's last element. The zero Layout means
// unknown (other APIs, no messages). The offsets are valid for the body Parse
// read and nothing else.
type Layout struct {
	Messages [2]int
	Last     [2]int
}

// Step is one assistant turn.
type Step struct {
	Message int    // index of the assistant message in request.messages
	Text    string // assistant content (string, or the text parts joined)
	Calls   []Call
}

// Call is one tool call of a step and the result the agent sent back for it.
type Call struct {
	ID string // tool_call_id; "" for legacy function_call
	// Result is the result text as sent (content string or text parts
	// joined); "" where a SessionCache keeps a digest instead.
	Result string
	// Args is the canonical form of the arguments: JSON re-encoded with sorted
	// keys and no insignificant whitespace, or the trimmed text when the
	// arguments do not parse.
	Args string
	// Primary is the primary argument (path, file_path, command, ...), with
	// shell read commands normalised (`cat f`, `head f` -> `read f`); "" if none.
	Primary string

	// extra holds the parts few calls have; nil for most: a SessionCache
	// keeps a Call per turn of every session.
	extra *callExtra
	Name  string
	// Fingerprint hashes Name + Args (metadata arguments excluded).
	Fingerprint uint64

	// The small fields sit together: a SessionCache keeps a Call per turn
	// of every session, and padding was a fifth of its size.
	HasResult bool // a tool message answered this call
	IsError   bool
	// resultFacts, when it has resultDigested, are the facts of a result
	// a SessionCache dropped (see digestResult).
	resultFacts uint8
	argBits     uint8
	// ResultMessage is the index of the tool message in request.messages, -1 if none.
	ResultMessage int32
	// resultFP caches ResultFingerprint (0: not computed yet). It is read
	// and written atomically: Trajectories may be inspected concurrently.
	resultFP uint64

	// argTarget, argBits and extra's edit are the call's argument facts
	// (a callFacts, see Call.known), stored apart so that the bits sit
	// with the other one-byte fields.
	argTarget uint64
	// PrimaryFingerprint hashes Name + Primary; 0 when Primary is "".
	PrimaryFingerprint uint64
}

// callExtra is what few calls have. Copies of a call share it, so it is
// never written: a change replaces it (setExtra).
type callExtra struct {
	edit   *editFacts    // the edit the call makes (see editFactsOf)
	digest *resultDigest // the evidence text of a dropped result while a rule may report it
	fail   *callError    // the call's error
}

// setExtra sets the call's edit facts, digest and error.
func (c *Call) setExtra(edit *editFacts, digest *resultDigest, fail *callError) {
	switch x := c.extra; {
	case edit == nil && digest == nil && fail == nil:
		c.extra = nil
	case x == nil || x.edit != edit || x.digest != digest || x.fail != fail:
		c.extra = &callExtra{edit: edit, digest: digest, fail: fail}
	}
}

// argEdit, digest and fail are the parts of c.extra, nil where c has none.
func (c *Call) argEdit() *editFacts {
	if c.extra == nil {
		return nil
	}
	return c.extra.edit
}

func (c *Call) digest() *resultDigest {
	if c.extra == nil {
		return nil
	}
	return c.extra.digest
}

func (c *Call) fail() *callError {
	if c.extra == nil {
		return nil
	}
	return c.extra.fail
}

// callError is the error of a failed call.
type callError struct {
	signature uint64 // hashes text, never 0
	text      string
}

// setError records the error of c, its normalised error line.
func (c *Call) setError(text string) {
	c.setExtra(c.argEdit(), c.digest(), &callError{signature: hashString(text) | 1, text: text})
}

// ErrorSignature hashes the normalised error (type + message); 0 if not an
// error.
func (c *Call) ErrorSignature() uint64 {
	if f := c.fail(); f != nil {
		return f.signature
	}
	return 0
}

// ErrorText is the normalised error line, shortened; "" if not an error.
func (c *Call) ErrorText() string {
	if f := c.fail(); f != nil {
		return f.text
	}
	return ""
}

// ResultFingerprint hashes the normalised result (see appendNormalized), 0
// when the call has no result. It is computed on first use and cached:
// normalising every result of a long history costs more than all the
// detectors together, and they compare only the results of recent or
// repeated calls. Safe for concurrent use.
func (c *Call) ResultFingerprint() uint64 {
	if !c.HasResult {
		return 0
	}
	if c.digested() {
		return atomic.LoadUint64(&c.resultFP)
	}
	if h := atomic.LoadUint64(&c.resultFP); h != 0 {
		return h
	}
	h := hashNormalized(resultText(c.Result))
	atomic.StoreUint64(&c.resultFP, h) // a 0 hash is merely recomputed
	return h
}

// churnMarks are the latest context-churn notices of a history: at holds
// the number of steps before each of the last len(at), oldest first; n
// counts them all.
type churnMarks struct {
	at [4]int32
	n  int32
}

// add records a notice after the first steps steps. A notice right after
// another, with no step between (OpenHands sends the context-length error
// and then the condenser's summary), is one cut: it would push an earlier
// cut out of the marks.
func (m *churnMarks) add(steps int) {
	if m.n > 0 && m.at[len(m.at)-1] == int32(steps) {
		return
	}
	copy(m.at[:], m.at[1:])
	m.at[len(m.at)-1] = int32(steps)
	m.n++
}

// last returns the positions of the last min(n, len(at)) notices, oldest
// first.
func (m *churnMarks) last() []int32 {
	k := min(int(m.n), len(m.at))
	return m.at[len(m.at)-k:]
}
