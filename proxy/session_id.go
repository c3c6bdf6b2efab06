package proxy

// The session id a client names for its requests: the /s/<id>/ prefix of
// the path, or a session header. The proxy only reads it; the session's
// identity (the key its state is kept under) is derived from it and the
// body in one place, policy/identity.go.

import (
	"errors"

	"github.com/loopguard/loopguard/policy"
	"github.com/valyala/fasthttp"
)

// sessionPrefix starts a path that names its session in the base URL:
// /s/<id>/v1/chat/completions (docs/design.md section 6). Every agent lets its
// user set a base URL, so this is the one session identity that works for
// all of them; `loopguard run` points agents at http://127.0.0.1:PORT/s/<id>.
const sessionPrefix = "/s/"

// sessionIDKey is the user value under which handle leaves the prefix's id
// for the chat pipeline.
const sessionIDKey = "loopguard.session_id"

// stripSessionPrefix removes a /s/<id> prefix from the request path, so that
// it never reaches the upstream, and keeps the id for sessionID. It reports
// false after answering 400 when the id is malformed: a prefix that cannot
// be a session is a client's mistake, and forwarding it would send an odd
// path upstream.
func stripSessionPrefix(ctx *fasthttp.RequestCtx) bool {
	// The original path is what forward sends upstream; the normalised one
	// catches a prefix spelled with dot segments.
	p := ctx.URI().PathOriginal()
	if !hasPrefixBytes(p, sessionPrefix) {
		if p = ctx.Path(); !hasPrefixBytes(p, sessionPrefix) {
			return true
		}
	}
	id, rest, err := splitSessionPath(p)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "loopguard: "+err.Error(), "invalid_request_error", "invalid_session_id")
		return false
	}
	ctx.SetUserValue(sessionIDKey, append([]byte(nil), id...)) // p's buffer is rewritten below
	ctx.URI().SetPathBytes(rest)
	return true
}

// splitSessionPath splits "/s/<id>/rest" into the id and "/rest"; err says
// what is wrong with a malformed one.
func splitSessionPath(p []byte) (id, rest []byte, err error) {
	p = p[len(sessionPrefix):]
	n := 0
	for n < len(p) && p[n] != '/' {
		n++
	}
	id, rest = p[:n], p[n:]
	if err := ValidateSessionID(string(id)); err != nil {
		return nil, nil, err
	}
	if len(rest) == 0 {
		return nil, nil, errSessionNoPath
	}
	return id, rest, nil
}

// Errors of a malformed /s/<id>/ prefix, answered 400 with their text.
var (
	errSessionEmpty  = errors.New("the session prefix /s/<id>/ has an empty id")
	errSessionLong   = errors.New("the session id in /s/<id>/ is longer than 128 bytes")
	errSessionStart  = errors.New("the session id in /s/<id>/ must start with a letter or a digit")
	errSessionChars  = errors.New("the session id in /s/<id>/ may hold only letters, digits, '.', '_' and '-'")
	errSessionNoPath = errors.New("the session prefix /s/<id>/ must be followed by the API path, as in /s/<id>/v1/chat/completions")
)

// ValidateSessionID checks an id for the /s/<id>/ prefix: 1 to
// policy.MaxKeyLen bytes of letters, digits, '.', '_' and '-', starting with
// a letter or digit. Such ids are safe in a header, a log line and a redis
// key, and are never one of loopguard's own key forms ("h:...", "x:..."),
// which hold a colon.
func ValidateSessionID(id string) error {
	switch {
	case id == "":
		return errSessionEmpty
	case len(id) > policy.MaxKeyLen:
		return errSessionLong
	case !alnum(id[0]):
		return errSessionStart
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return errSessionChars
		}
	}
	return nil
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// sessionID returns the client's session id of a request: the /s/<id>/
// prefix's, else the value of the first of cfg's session headers that is
// present and not blank; nil when there is none. The result aliases the
// request; do not keep it after the handler returns.
func sessionID(ctx *fasthttp.RequestCtx, cfg *policy.Config) []byte {
	id, _ := clientHeaders(ctx, cfg)
	return id
}

// clientHeaders returns the request's session id (sessionID) and its
// X-Loopguard-Mode header, nil when absent. Every request of a guarded API
// reads both: one pass over its headers, where a Peek for each of the
// session headers (six by default) would canonicalise the name and walk
// the headers every time.
func clientHeaders(ctx *fasthttp.RequestCtx, cfg *policy.Config) (session, mode []byte) {
	prefixed, byPath := ctx.UserValue(sessionIDKey).([]byte)
	if byPath {
		session = prefixed
	}
	names := len(cfg.SessionHeaders) + 1
	if names > 64 {
		// More than the pass keeps track of: a Peek for each.
		if !byPath {
			session = peekSessionID(&ctx.Request.Header, cfg)
		}
		return session, ctx.Request.Header.Peek(headerMode)
	}
	// seen marks the names met: as for Peek, a name's first header counts,
	// blank or not. best is the index of the first name in cfg's order
	// whose first header has a value.
	var seen uint64
	best, modeSeen := names, false
	for k, v := range ctx.Request.Header.All() {
		if !modeSeen && asciiEqualFold(k, headerMode) {
			mode, modeSeen = v, true
			continue
		}
		if byPath {
			continue
		}
		for i := range min(names, best) {
			name := cfg.SessionHeader
			if i > 0 {
				name = cfg.SessionHeaders[i-1]
			}
			if seen&(1<<i) != 0 || !asciiEqualFold(k, name) {
				continue
			}
			seen |= 1 << i
			if !blank(v) {
				best, session = i, v
			}
		}
	}
	return session, mode
}

// peekSessionID is sessionID's reading of cfg's session headers by Peek.
func peekSessionID(h *fasthttp.RequestHeader, cfg *policy.Config) []byte {
	if v := headerValue(h, cfg.SessionHeader); v != nil {
		return v
	}
	for _, name := range cfg.SessionHeaders {
		if v := headerValue(h, name); v != nil {
			return v
		}
	}
	return nil
}

// headerValue returns header name's value, nil when it is absent or blank.
func headerValue(h *fasthttp.RequestHeader, name string) []byte {
	if v := h.Peek(name); !blank(v) {
		return v
	}
	return nil
}

// blank reports a header value of nothing but spaces and tabs.
func blank(v []byte) bool {
	for _, c := range v {
		if c != ' ' && c != '\t' {
			return false
		}
	}
	return true
}
