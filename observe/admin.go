package observe

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
)

// DefaultPrefix is where the proxy mounts Admin.
const DefaultPrefix = "/loopguard/"

// SessionControl acts on sessions' policy state. *policy.Policy implements it.
type SessionControl interface {
	ResetSession(ctx context.Context, key string) error
	SetMode(ctx context.Context, key string, m policy.Mode) error
	SetBudget(ctx context.Context, key string, b *policy.Budget) error
}

// StateLoader reads a session's policy state. policy.Store implements it.
type StateLoader interface {
	Load(ctx context.Context, key string) (policy.State, error)
}

var (
	_ SessionControl = (*policy.Policy)(nil)
	_ StateLoader    = (policy.Store)(nil)
)

// AdminOptions configures Admin.
type AdminOptions struct {
	// Token, when set, is required as "Authorization: Bearer <token>" on the
	// API. Empty: everything under the prefix answers only requests that
	// came through a loopback listener (see Admin).
	Token string
	// Control resets sessions and sets their mode; nil answers 501.
	Control SessionControl
	// States loads a session's policy state for its detail; nil leaves it out.
	States StateLoader
	// Config is the effective configuration, served redacted (RedactConfig).
	Config any
	// Prefix is the mount point; default DefaultPrefix.
	Prefix string
	// Timeout bounds Control and States calls. Default 2s.
	Timeout time.Duration
	// PollInterval is how often the live feed looks for new entries.
	// Default 250ms.
	PollInterval time.Duration
	// StreamLifetime ends a live feed connection after this long, so that
	// a connection whose client vanished without a write error is not held
	// forever; dashboards reconnect. Default 10m.
	StreamLifetime time.Duration
}

// Admin serves the admin API under <prefix>api/ and the dashboard at
// <prefix>. It is a plain http.Handler: the proxy mounts it with
// fasthttpadaptor.
//
// Access: with a Token, API requests need it as a bearer token (compared in
// constant time); the dashboard's static files need none, as they hold no
// data. Without a Token every request must have come through a loopback
// listener: the handler reads the listener's address from the request
// context under http.LocalAddrContextKey, which net/http sets and which the
// proxy sets with RequestCtx.SetUserValue(http.LocalAddrContextKey,
// ctx.LocalAddr()) before calling the adaptor. A request without it is
// refused (fail closed).
type Admin struct {
	rec    *Recorder
	opts   AdminOptions
	config []byte
	static http.Handler
	now    func() time.Time
}

//go:embed static
var staticFiles embed.FS

// NewAdmin returns the admin handler over rec.
func NewAdmin(rec *Recorder, opts AdminOptions) (*Admin, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.StreamLifetime <= 0 {
		opts.StreamLifetime = 10 * time.Minute
	}
	cfg, err := json.Marshal(RedactConfig(opts.Config))
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	return &Admin{
		rec:    rec,
		opts:   opts,
		config: cfg,
		static: http.StripPrefix(strings.TrimSuffix(opts.Prefix, "/"), http.FileServerFS(sub)),
		now:    rec.now,
	}, nil
}

// ServeHTTP implements http.Handler.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, a.opts.Prefix)
	if !ok {
		if r.URL.Path+"/" == a.opts.Prefix {
			http.Redirect(w, r, a.opts.Prefix, http.StatusMovedPermanently)
			return
		}
		writeError(w, http.StatusNotFound, "not found", "not_found")
		return
	}
	api, isAPI := strings.CutPrefix(rest, "api/")
	if !a.allowed(w, r, isAPI) {
		return
	}
	if !isAPI {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, http.StatusMethodNotAllowed, "method not allowed", "method_not_allowed")
			return
		}
		// The file server answers 500 to names io/fs rejects; they name no file.
		if rest != "" && (!utf8.ValidString(rest) || !fs.ValidPath(strings.TrimSuffix(rest, "/"))) {
			writeError(w, http.StatusNotFound, "not found", "not_found")
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		a.static.ServeHTTP(w, r)
		return
	}
	a.api(w, r, api)
}

// Guard wraps h, which serves data like the API does (the proxy's /metrics),
// in the API's access rule: with a Token it needs the bearer token, without
// one it answers only through loopback listeners.
func (a *Admin) Guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.allowed(w, r, true) {
			h.ServeHTTP(w, r)
		}
	})
}

// allowed applies the access rule and answers the refusal itself.
func (a *Admin) allowed(w http.ResponseWriter, r *http.Request, api bool) bool {
	if a.opts.Token != "" {
		if !api {
			return true
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(a.opts.Token)) == 1 {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="loopguard"`)
		writeError(w, http.StatusUnauthorized, "a valid admin token is required (Authorization: Bearer <token>)", "unauthorized")
		return false
	}
	if IsLoopbackRequest(r) {
		return true
	}
	writeError(w, http.StatusForbidden, "loopguard's admin API and metrics are served on loopback listeners only unless [admin] token is set", "forbidden")
	return false
}

// IsLoopbackRequest reports whether r came through a listener bound to a
// loopback address, as http.LocalAddrContextKey in its context says.
func IsLoopbackRequest(r *http.Request) bool {
	addr, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if addr == nil {
		return false
	}
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	case *net.UnixAddr:
		return true // a unix socket is local by construction
	default:
		host, _, err := net.SplitHostPort(addr.String())
		if err != nil {
			return false
		}
		ip = net.ParseIP(host)
	}
	return ip != nil && ip.IsLoopback()
}

func (a *Admin) api(w http.ResponseWriter, r *http.Request, path string) {
	switch {
	case path == "sessions":
		if a.method(w, r, http.MethodGet) {
			a.sessions(w, r)
		}
	case strings.HasPrefix(path, "sessions/"):
		a.session(w, r, strings.TrimPrefix(path, "sessions/"))
	case path == "stats":
		if a.method(w, r, http.MethodGet) {
			q := r.URL.Query()
			writeJSON(w, http.StatusOK, a.rec.Stats(Filter{Category: inspect.Category(q.Get("category")), Model: q.Get("model")}, a.now()))
		}
	case path == "config":
		if a.method(w, r, http.MethodGet) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(a.config)
		}
	case path == "events":
		if a.method(w, r, http.MethodGet) {
			a.events(w, r)
		}
	default:
		writeError(w, http.StatusNotFound, "no such admin endpoint", "not_found")
	}
}

func (a *Admin) method(w http.ResponseWriter, r *http.Request, m string) bool {
	if r.Method == m || (m == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	w.Header().Set("Allow", m)
	writeError(w, http.StatusMethodNotAllowed, "method not allowed; use "+m, "method_not_allowed")
	return false
}

func (a *Admin) sessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := Filter{Category: inspect.Category(q.Get("category")), Model: q.Get("model"), State: q.Get("state")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			writeError(w, http.StatusBadRequest, "limit must be an integer in 1..10000", "invalid_request_error")
			return
		}
		f.Limit = n
	}
	writeJSON(w, http.StatusOK, a.rec.Sessions(f))
}

// sessionDetail is the answer of GET sessions/{key}.
type sessionDetail struct {
	Session  SessionSummary `json:"session"`
	Timeline []Entry        `json:"timeline"`
	// Policy is the session's policy state; absent when unknown.
	Policy      *policy.State `json:"policy,omitempty"`
	PolicyError string        `json:"policy_error,omitempty"`
}

func (a *Admin) session(w http.ResponseWriter, r *http.Request, rest string) {
	key, action, _ := strings.Cut(rest, "/")
	if key == "" || len(key) > 4*policy.MaxKeyLen {
		writeError(w, http.StatusNotFound, "no such session", "not_found")
		return
	}
	switch action {
	case "":
		if !a.method(w, r, http.MethodGet) {
			return
		}
		sum, tl, ok := a.rec.Session(key)
		d := sessionDetail{Session: sum, Timeline: tl}
		if a.opts.States != nil {
			ctx, cancel := a.callCtx(r)
			st, err := a.opts.States.Load(ctx, key)
			cancel()
			switch {
			case err != nil:
				d.PolicyError = "the session store could not be read"
			case !st.Updated.IsZero() || len(st.Patterns) > 0 || st.Mode != "":
				d.Policy = &st
				ok = true
			}
		}
		if !ok {
			writeError(w, http.StatusNotFound, "no such session", "not_found")
			return
		}
		if d.Session.Key == "" {
			d.Session = SessionSummary{Key: key, State: StateActive, Level: -1}
		}
		if d.Timeline == nil {
			d.Timeline = []Entry{}
		}
		writeJSON(w, http.StatusOK, d)
	case "reset":
		if !a.method(w, r, http.MethodPost) || !a.control(w) {
			return
		}
		ctx, cancel := a.callCtx(r)
		defer cancel()
		if err := a.opts.Control.ResetSession(ctx, key); err != nil {
			writeError(w, http.StatusServiceUnavailable, "the session store could not be updated", "store_error")
			return
		}
		a.rec.admin(key, noteReset, "", a.now())
		writeJSON(w, http.StatusOK, map[string]any{"session": key, "reset": true})
	case "mode":
		if !a.method(w, r, http.MethodPost) || !a.control(w) {
			return
		}
		var body struct {
			Mode *string `json:"mode"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&body); err != nil || body.Mode == nil {
			writeError(w, http.StatusBadRequest, `body must be {"mode":"enforce|shadow|off"} ("" clears the override)`, "invalid_request_error")
			return
		}
		var m policy.Mode
		if *body.Mode != "" {
			var ok bool
			if m, ok = policy.ParseMode(*body.Mode); !ok {
				writeError(w, http.StatusBadRequest, "mode must be enforce, shadow, off or empty", "invalid_request_error")
				return
			}
		}
		ctx, cancel := a.callCtx(r)
		defer cancel()
		if err := a.opts.Control.SetMode(ctx, key, m); err != nil {
			writeError(w, http.StatusServiceUnavailable, "the session store could not be updated", "store_error")
			return
		}
		note := "mode " + string(m)
		if m == "" {
			note = "mode override cleared"
		}
		a.rec.admin(key, note, m, a.now())
		writeJSON(w, http.StatusOK, map[string]any{"session": key, "mode": m})
	case "budget":
		a.setBudget(w, r, key)
	default:
		writeError(w, http.StatusNotFound, "no such admin endpoint", "not_found")
	}
}

// setBudget serves POST sessions/{key}/budget: {"max_tokens":N,"max_turns":N}
// sets the session's own budget (a zero field inherits the configured one,
// a negative one turns it off), {} or null clears it.
func (a *Admin) setBudget(w http.ResponseWriter, r *http.Request, key string) {
	if !a.method(w, r, http.MethodPost) || !a.control(w) {
		return
	}
	var b *policy.Budget
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeError(w, http.StatusBadRequest, `body must be {"max_tokens":N,"max_turns":N} (null clears the override)`, "invalid_request_error")
		return
	}
	if b != nil && *b == (policy.Budget{}) {
		b = nil
	}
	ctx, cancel := a.callCtx(r)
	defer cancel()
	if err := a.opts.Control.SetBudget(ctx, key, b); err != nil {
		writeError(w, http.StatusServiceUnavailable, "the session store could not be updated", "store_error")
		return
	}
	note := "budget override cleared"
	if b != nil {
		note = fmt.Sprintf("budget max_tokens=%d max_turns=%d", b.MaxTokens, b.MaxTurns)
	}
	a.rec.admin(key, note, "", a.now())
	writeJSON(w, http.StatusOK, map[string]any{"session": key, "budget": b})
}

// callCtx bounds a store call made for r by the admin timeout. It keeps
// r's values but not its cancellation: under fasthttp's adaptor r's context
// is the server's RequestCtx, whose Done reads a field that Shutdown writes
// without synchronisation (fasthttp v1.74), from the goroutine that
// context.WithTimeout starts to watch a foreign parent. That cancellation
// only ever says the server is shutting down, which the timeout bounds.
func (a *Admin) callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), a.opts.Timeout)
}

func (a *Admin) control(w http.ResponseWriter) bool {
	if a.opts.Control != nil {
		return true
	}
	writeError(w, http.StatusNotImplemented, "session control is not available", "not_implemented")
	return false
}

// events streams new timeline entries as SSE, one "entry" event each, with
// the entry's Seq as the event id so that a reconnecting EventSource resumes
// (Last-Event-ID). A comment line every 15s keeps idle proxies from closing
// the connection and detects a vanished client.
func (a *Admin) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported", "server_error")
		return
	}
	seq := a.rec.Seq()
	if s := r.Header.Get("Last-Event-ID"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			seq = n
		}
	} else if s := r.URL.Query().Get("since"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			seq = n
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, "retry: 2000\n: loopguard live feed\n\n"); err != nil {
		return
	}
	fl.Flush()

	tick := time.NewTicker(a.opts.PollInterval)
	defer tick.Stop()
	end := time.NewTimer(a.opts.StreamLifetime)
	defer end.Stop()
	lastWrite := time.Now()
	buf := make([]byte, 0, 4096)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-end.C:
			return
		case <-tick.C:
		}
		var entries []Entry
		entries, seq = a.rec.Since(seq, 256)
		buf = buf[:0]
		for i := range entries {
			b, err := json.Marshal(&entries[i])
			if err != nil {
				continue
			}
			buf = append(buf, "id: "...)
			buf = strconv.AppendUint(buf, entries[i].Seq, 10)
			buf = append(buf, "\nevent: entry\ndata: "...)
			buf = append(buf, b...)
			buf = append(buf, "\n\n"...)
		}
		if len(buf) == 0 && time.Since(lastWrite) < 15*time.Second {
			continue
		}
		if len(buf) == 0 {
			buf = append(buf, ": keep-alive\n\n"...)
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		fl.Flush()
		lastWrite = time.Now()
	}
}

// writeError answers an OpenAI-shaped error.
func writeError(w http.ResponseWriter, status int, msg, code string) {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		typ = "authentication_error"
	case status >= 500:
		typ = "server_error"
	}
	if code == "invalid_request_error" {
		code = "invalid_request"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"cannot encode the answer","type":"server_error","code":"server_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
