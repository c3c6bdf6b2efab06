package observe

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
)

// fakeControl records what the admin API asked of the policy.
type fakeControl struct {
	resets  []string
	modes   map[string]policy.Mode
	budgets map[string]*policy.Budget
	err     error
}

func (f *fakeControl) SetBudget(_ context.Context, key string, b *policy.Budget) error {
	if f.err != nil {
		return f.err
	}
	if f.budgets == nil {
		f.budgets = map[string]*policy.Budget{}
	}
	f.budgets[key] = b
	return nil
}

func (f *fakeControl) ResetSession(_ context.Context, key string) error {
	if f.err != nil {
		return f.err
	}
	f.resets = append(f.resets, key)
	return nil
}

func (f *fakeControl) SetMode(_ context.Context, key string, m policy.Mode) error {
	if f.err != nil {
		return f.err
	}
	if f.modes == nil {
		f.modes = map[string]policy.Mode{}
	}
	f.modes[key] = m
	return nil
}

// fakeStates serves one session's policy state.
type fakeStates map[string]policy.State

func (f fakeStates) Load(_ context.Context, key string) (policy.State, error) {
	if key == "broken" {
		return policy.State{}, errors.New("store down")
	}
	return f[key], nil
}

func localRequest(method, target, body string, local net.Addr) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if local != nil {
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, local))
	}
	return r
}

var (
	loopback = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8787}
	public   = &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 8787}
)

func newTestAdmin(t *testing.T, token string) (*Admin, *Observer, *fakeControl) {
	t.Helper()
	o, _, _, _ := newTestObserver(t, Options{})
	ctl := &fakeControl{}
	a, err := NewAdmin(o.Recorder(), AdminOptions{
		Token: token, Control: ctl,
		States: fakeStates{"loop-a": {Mode: policy.ModeShadow, Updated: time.Unix(1, 0)}},
		Config: struct {
			Admin struct {
				Token string `toml:"token"`
			} `toml:"admin"`
		}{Admin: struct {
			Token string `toml:"token"`
		}{Token: "tok-secret"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	o.Request(RequestInfo{Session: "loop-a", Model: "gpt", Steps: 3, Tool: "bash", Fingerprint: 42,
		Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p")})
	return a, o, ctl
}

// TestAdminAccess covers the admin handler and, at target "/metrics", a
// handler wrapped in Guard, which follows the API's rule.
func TestAdminAccess(t *testing.T) {
	tests := []struct {
		name   string
		token  string
		local  net.Addr
		auth   string
		target string
		want   int
	}{
		{"no token, loopback", "", loopback, "", "/loopguard/api/sessions", 200},
		{"no token, ipv6 loopback", "", &net.TCPAddr{IP: net.IPv6loopback}, "", "/loopguard/api/sessions", 200},
		{"no token, public listener", "", public, "", "/loopguard/api/sessions", 403},
		{"no token, public listener, dashboard", "", public, "", "/loopguard/", 403},
		{"no token, unknown listener", "", nil, "", "/loopguard/api/sessions", 403},
		{"token, none sent", "s3cret", loopback, "", "/loopguard/api/sessions", 401},
		{"token, wrong", "s3cret", public, "Bearer nope", "/loopguard/api/sessions", 401},
		{"token, not bearer", "s3cret", public, "Basic s3cret", "/loopguard/api/sessions", 401},
		{"token, right, public", "s3cret", public, "Bearer s3cret", "/loopguard/api/sessions", 200},
		{"token, dashboard needs none", "s3cret", public, "", "/loopguard/", 200},
		{"guarded, no token, loopback", "", loopback, "", "/metrics", 200},
		{"guarded, no token, public listener", "", public, "", "/metrics", 403},
		{"guarded, no token, unknown listener", "", nil, "", "/metrics", 403},
		{"guarded, token, none sent", "s3cret", loopback, "", "/metrics", 401},
		{"guarded, token, right, public", "s3cret", public, "Bearer s3cret", "/metrics", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _, _ := newTestAdmin(t, tt.token)
			r := localRequest("GET", tt.target, "", tt.local)
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			var h http.Handler = a
			if tt.target == "/metrics" {
				h = a.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "data") }))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Fatalf("GET %s = %d; want %d (%s)", tt.target, w.Code, tt.want, w.Body)
			}
			if tt.target == "/metrics" && (w.Code == 200) != (w.Body.String() == "data") {
				t.Errorf("GET /metrics = %d %q; want the guarded handler's body only when allowed", w.Code, w.Body)
			}
			if w.Code >= 400 {
				checkErrorShape(t, w)
			}
		})
	}
}

// checkErrorShape asserts an OpenAI-shaped error body.
func checkErrorShape(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	var e struct {
		Error struct {
			Message, Type, Code string
		} `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Errorf("error body %q is not {\"error\":{\"message\",\"type\",\"code\"}} (%v)", w.Body, err)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q; want application/json", ct)
	}
}

func TestAdminEndpoints(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		target   string
		body     string
		want     int
		contains []string
		excludes []string
	}{
		{"sessions", "GET", "/loopguard/api/sessions", "", 200, []string{`"key":"loop-a"`, `"state":"warned"`, `"total":1`}, nil},
		{"sessions filtered out", "GET", "/loopguard/api/sessions?category=error_cycle", "", 200, []string{`"matched":0`}, nil},
		{"sessions bad limit", "GET", "/loopguard/api/sessions?limit=-1", "", 400, nil, nil},
		{"sessions wrong method", "DELETE", "/loopguard/api/sessions", "", 405, nil, nil},
		{"session detail", "GET", "/loopguard/api/sessions/loop-a", "", 200, []string{`"timeline":[`, `"tool":"bash"`, `"fingerprint":"000000000000002a"`, `"category":"tool_repetition"`, `"action":"warn"`, `"policy":{`, `"mode":"shadow"`}, []string{"secret-token\\\"", `"command"`}},
		{"session unknown", "GET", "/loopguard/api/sessions/nobody", "", 404, nil, nil},
		{"session store broken", "GET", "/loopguard/api/sessions/broken", "", 404, nil, nil},
		{"reset", "POST", "/loopguard/api/sessions/loop-a/reset", "", 200, []string{`"reset":true`}, nil},
		{"reset by GET", "GET", "/loopguard/api/sessions/loop-a/reset", "", 405, nil, nil},
		{"mode", "POST", "/loopguard/api/sessions/loop-a/mode", `{"mode":"off"}`, 200, []string{`"mode":"off"`}, nil},
		{"mode clear", "POST", "/loopguard/api/sessions/loop-a/mode", `{"mode":""}`, 200, nil, nil},
		{"mode invalid", "POST", "/loopguard/api/sessions/loop-a/mode", `{"mode":"turbo"}`, 400, nil, nil},
		{"mode missing", "POST", "/loopguard/api/sessions/loop-a/mode", `{}`, 400, nil, nil},
		{"mode not json", "POST", "/loopguard/api/sessions/loop-a/mode", `mode=off`, 400, nil, nil},
		{"budget", "POST", "/loopguard/api/sessions/loop-a/budget", `{"max_tokens":5000,"max_turns":-1}`, 200, []string{`"max_tokens":5000`}, nil},
		{"budget clear", "POST", "/loopguard/api/sessions/loop-a/budget", `null`, 200, []string{`"budget":null`}, nil},
		{"budget unknown field", "POST", "/loopguard/api/sessions/loop-a/budget", `{"max_dollars":5}`, 400, nil, nil},
		{"budget not json", "POST", "/loopguard/api/sessions/loop-a/budget", `max_tokens=5`, 400, nil, nil},
		{"budget by GET", "GET", "/loopguard/api/sessions/loop-a/budget", "", 405, nil, nil},
		{"unknown session action", "POST", "/loopguard/api/sessions/loop-a/explode", "", 404, nil, nil},
		{"config redacted", "GET", "/loopguard/api/config", "", 200, []string{`"token":"[REDACTED]"`}, []string{"tok-secret"}},
		{"stats", "GET", "/loopguard/api/stats", "", 200, []string{`"bucket_seconds":60`, `"models":["gpt"]`}, nil},
		{"unknown endpoint", "GET", "/loopguard/api/nothing", "", 404, nil, nil},
		{"outside prefix", "GET", "/elsewhere", "", 404, nil, nil},
		{"dashboard", "GET", "/loopguard/", "", 200, []string{"<title>loopguard</title>", `src="app.js"`}, []string{"http://", "https://"}},
		{"dashboard script", "GET", "/loopguard/app.js", "", 200, []string{"api/events"}, []string{"http://", "https://"}},
		{"dashboard by POST", "POST", "/loopguard/", "", 405, nil, nil},
		{"prefix without slash", "GET", "/loopguard", "", 301, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _, ctl := newTestAdmin(t, "")
			w := httptest.NewRecorder()
			a.ServeHTTP(w, localRequest(tt.method, tt.target, tt.body, loopback))
			if w.Code != tt.want {
				t.Fatalf("%s %s = %d; want %d (%s)", tt.method, tt.target, w.Code, tt.want, w.Body)
			}
			body := w.Body.String()
			for _, s := range tt.contains {
				if !strings.Contains(body, s) {
					t.Errorf("body lacks %s: %s", s, body)
				}
			}
			for _, s := range tt.excludes {
				if strings.Contains(body, s) {
					t.Errorf("body has %s: %s", s, body)
				}
			}
			if w.Code >= 400 && w.Code != 404 || strings.Contains(tt.target, "/api/") && w.Code >= 400 {
				checkErrorShape(t, w)
			}
			switch tt.name {
			case "reset":
				if len(ctl.resets) != 1 || ctl.resets[0] != "loop-a" {
					t.Errorf("resets = %v; want [loop-a]", ctl.resets)
				}
			case "mode":
				if ctl.modes["loop-a"] != policy.ModeOff {
					t.Errorf("mode = %q; want off", ctl.modes["loop-a"])
				}
			case "budget":
				if b := ctl.budgets["loop-a"]; b == nil || *b != (policy.Budget{MaxTokens: 5000, MaxTurns: -1}) {
					t.Errorf("budget = %+v; want max_tokens 5000, max_turns -1", b)
				}
			case "budget clear":
				if b, ok := ctl.budgets["loop-a"]; !ok || b != nil {
					t.Errorf("budget = %+v, set %v; want cleared", b, ok)
				}
			}
		})
	}
}

func TestAdminActionsAppearInTimeline(t *testing.T) {
	a, o, _ := newTestAdmin(t, "")
	for _, req := range []struct{ target, body string }{
		{"/loopguard/api/sessions/loop-a/mode", `{"mode":"shadow"}`},
		{"/loopguard/api/sessions/loop-a/reset", ""},
	} {
		w := httptest.NewRecorder()
		a.ServeHTTP(w, localRequest("POST", req.target, req.body, loopback))
		if w.Code != 200 {
			t.Fatalf("POST %s = %d", req.target, w.Code)
		}
	}
	sum, tl, _ := o.Recorder().Session("loop-a")
	if sum.Mode != policy.ModeShadow || sum.State != StateActive {
		t.Errorf("after mode+reset: mode %q state %q; want shadow, active", sum.Mode, sum.State)
	}
	var notes []string
	for _, e := range tl {
		if e.Kind == KindAdmin {
			notes = append(notes, e.Note)
		}
	}
	if !reflect.DeepEqual(notes, []string{"mode shadow", "reset"}) {
		t.Errorf("admin notes = %v; want [mode shadow reset]", notes)
	}
}

func TestAdminStoreFailure(t *testing.T) {
	a, _, ctl := newTestAdmin(t, "")
	ctl.err = errors.New("redis down")
	w := httptest.NewRecorder()
	a.ServeHTTP(w, localRequest("POST", "/loopguard/api/sessions/loop-a/reset", "", loopback))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("reset with a failing store = %d; want 503", w.Code)
	}
	checkErrorShape(t, w)
	if strings.Contains(w.Body.String(), "redis down") {
		t.Errorf("error leaks the store's error: %s", w.Body)
	}
}

func TestAdminWithoutControl(t *testing.T) {
	o, _, _, _ := newTestObserver(t, Options{})
	a, err := NewAdmin(o.Recorder(), AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, localRequest("POST", "/loopguard/api/sessions/x/reset", "", loopback))
	if w.Code != http.StatusNotImplemented {
		t.Errorf("reset without control = %d; want 501", w.Code)
	}
}

func TestAdminEventsStream(t *testing.T) {
	o, _, _, _ := newTestObserver(t, Options{})
	a, err := NewAdmin(o.Recorder(), AdminOptions{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()
	o.Request(RequestInfo{Session: "before"})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/loopguard/api/events", nil)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q; want text/event-stream", ct)
	}
	o.Request(RequestInfo{Session: "live-1", Decision: loopDecision(inspect.ErrorCycle, policy.Warn, 0, "p")})

	br := bufio.NewReader(res.Body)
	var id, data string
	for data == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the feed: %v", err)
		}
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimSpace(line[4:])
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
	var e Entry
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		t.Fatalf("entry %q: %v", data, err)
	}
	// The feed starts at the present: the entry made before connecting is not replayed.
	if e.Session != "live-1" || e.Category != inspect.ErrorCycle || e.Action != policy.Warn || id != "2" {
		t.Errorf("first live entry = %+v id %s; want session live-1, error_cycle, warn, id 2", e, id)
	}
	cancel()
	_, _ = io.Copy(io.Discard, res.Body)
}

func TestRedactConfig(t *testing.T) {
	b, err := os.ReadFile("testdata/config.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Give    json.RawMessage `json:"give"`
		Want    any             `json:"want"`
		Secrets []string        `json:"secrets"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Upstream struct {
			URL     string        `toml:"url"`
			APIKey  string        `toml:"api_key"`
			Timeout time.Duration `toml:"timeout"`
		} `toml:"upstream"`
		Admin struct {
			Token string `toml:"token"`
		} `toml:"admin"`
		Policy struct {
			Store    string   `toml:"store"`
			RedisURL string   `toml:"redis_url"`
			Ladder   []string `toml:"ladder"`
		} `toml:"policy"`
		Empty struct {
			APIKey string `toml:"api_key"`
		} `toml:"empty"`
		hidden string
	}
	if err := json.Unmarshal(fx.Give, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.hidden = "x"
	out, err := json.Marshal(RedactConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	var got any
	_ = json.Unmarshal(out, &got)
	if !reflect.DeepEqual(got, fx.Want) {
		t.Errorf("RedactConfig = %s; want %v", out, fx.Want)
	}
	for _, s := range fx.Secrets {
		if strings.Contains(string(out), s) {
			t.Errorf("redacted config leaks %q: %s", s, out)
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ give, want string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://user:pw@h:1/0", "redis://user:xxxxx@h:1/0"},
		{"redis://tokenonly@h:1", "redis://xxxxx@h:1"},
		{"https://h/v1?api_key=abc&x=1", "https://h/v1?api_key=xxxxx&x=1"},
		{"://bad url%%", Redacted},
	}
	for _, tt := range tests {
		if got := redactURL(tt.give); got != tt.want {
			t.Errorf("redactURL(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

func TestIsLoopbackRequest(t *testing.T) {
	tests := []struct {
		name string
		give net.Addr
		want bool
	}{
		{"ipv4", loopback, true},
		{"ipv4 127.5", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 5)}, true},
		{"ipv6", &net.TCPAddr{IP: net.IPv6loopback}, true},
		{"public", public, false},
		{"unspecified", &net.TCPAddr{IP: net.IPv4zero}, false},
		{"unix", &net.UnixAddr{Name: "/tmp/lg.sock", Net: "unix"}, true},
		{"none", nil, false},
	}
	for _, tt := range tests {
		r := localRequest("GET", "/", "", tt.give)
		if got := IsLoopbackRequest(r); got != tt.want {
			t.Errorf("IsLoopbackRequest(%s) = %v; want %v", tt.name, got, tt.want)
		}
	}
}
