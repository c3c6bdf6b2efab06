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
	if id, ok := ctx.UserValue(sessionIDKey).([]byte); ok {
		return id
	}
	if v := headerValue(&ctx.Request.Header, cfg.SessionHeader); v != nil {
		return v
	}
	for _, h := range cfg.SessionHeaders {
		if v := headerValue(&ctx.Request.Header, h); v != nil {
			return v
		}
	}
	return nil
}

// headerValue returns header name's value, nil when it is absent or blank.
func headerValue(h *fasthttp.RequestHeader, name string) []byte {
	v := h.Peek(name)
	for _, c := range v {
		if c != ' ' && c != '\t' {
			return v
		}
	}
	return nil
}
