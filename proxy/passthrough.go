package proxy

import (
	"bytes"
	"strings"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/valyala/fasthttp"
)

// The operator's key ([upstream] api_key) reaches only the paths listed in
// [upstream] passthrough: by default the APIs loopguard guards, the model
// listings, and Ollama's read-only endpoints. Any other path (file
// uploads, batches, fine-tuning, an admin endpoint, Ollama's /api/pull or
// /api/delete) is forwarded with the client's own credentials, or refused
// 401 when the client sent none: a client of loopguard may not act on the
// operator's account beyond asking the model.

// DefaultPassthrough is [upstream] passthrough's default.
var DefaultPassthrough = []string{
	// The guarded APIs (every path of the wire-API registry), and what
	// their clients call beside them (Codex compacts its history, Claude
	// Code and Gemini CLI count tokens).
	guardedPaths, "/v1/responses/compact", "/v1/messages/count_tokens", "/v1beta/models/*",
	// llama.cpp's resumable streams of those.
	"/v1/stream/*",
	// Model listings.
	"/v1/models", "/models", "/v1/models/*", "/v1beta/models",
	// Ollama's read-only endpoints.
	"/api/tags", "/api/show", "/api/ps", "/api/version",
}

// guardedPaths, in [upstream] passthrough, stands for every path of the
// APIs loopguard guards (internal/wireapi), under any prefix.
const guardedPaths = "guarded"

// pathSet is a list of path patterns: each matches the paths that end with
// its segments, "*" matching any one segment, so that "/v1/models/*"
// matches /v1/models/gpt-4.1 and /openai/v1/models/gpt-4.1, as the guarded
// APIs are found under any prefix; guardedPaths matches the guarded APIs'.
type pathSet struct {
	patterns [][]string
	guarded  bool
}

func newPathSet(patterns []string) pathSet {
	var ps pathSet
	for _, p := range patterns {
		if p == guardedPaths {
			ps.guarded = true
			continue
		}
		ps.patterns = append(ps.patterns, strings.Split(strings.Trim(p, "/"), "/"))
	}
	return ps
}

// has reports whether path matches a pattern of ps.
func (ps pathSet) has(path []byte) bool {
	if ps.guarded && wireapi.Match(path).API != nil {
		return true
	}
	path = bytes.Trim(path, "/")
	for _, segs := range ps.patterns {
		if matchTail(path, segs) {
			return true
		}
	}
	return false
}

// matchTail reports whether path's last segments are segs.
func matchTail(path []byte, segs []string) bool {
	for i := len(segs) - 1; i >= 0; i-- {
		var seg []byte
		if j := bytes.LastIndexByte(path, '/'); j >= 0 {
			seg, path = path[j+1:], path[:j]
		} else if seg, path = path, nil; len(seg) == 0 {
			return false // path is shorter than the pattern
		}
		if segs[i] != "*" && string(seg) != segs[i] {
			return false
		}
	}
	return true
}

// credentialHeaders carry a client's own credentials to an API (Gemini's
// may come as the query's key instead).
var credentialHeaders = [...]string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"}

// operatorKey is the key the request of ctx goes upstream with: [upstream]
// api_key on the passthrough paths, "" (the client's own headers) on the
// rest, when no key is configured, and on an intercepted connection, whose
// host gets the agent's own credentials.
func (s *Server) operatorKey(ctx *fasthttp.RequestCtx) string {
	if s.cfg.Upstream.APIKey == "" || !s.passthrough.has(ctx.Path()) || interceptedHost(ctx) != "" {
		return ""
	}
	return s.cfg.Upstream.APIKey
}

// refuseUnkeyed answers 401 a request that would reach the upstream on a
// path the operator's key does not serve, without credentials of its own.
func (s *Server) refuseUnkeyed(ctx *fasthttp.RequestCtx) bool {
	if s.cfg.Upstream.APIKey == "" || s.passthrough.has(ctx.Path()) {
		return false
	}
	for _, h := range credentialHeaders {
		if len(ctx.Request.Header.Peek(h)) > 0 {
			return false
		}
	}
	if len(ctx.QueryArgs().Peek("key")) > 0 {
		return false
	}
	writeError(ctx, fasthttp.StatusUnauthorized,
		"loopguard: this path is not served with the operator's key ([upstream] passthrough); send your own credentials",
		"invalid_request_error", "credentials_required")
	return true
}
