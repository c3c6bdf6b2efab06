package observe

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
)

type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}

// FuzzAdmin feeds untrusted paths, queries and bodies to the admin API: it
// must never panic and always answer a status from its documented set.
func FuzzAdmin(f *testing.F) {
	for _, s := range []struct{ method, target, body string }{
		{"GET", "/loopguard/api/sessions?limit=5&category=tool_repetition", ""},
		{"GET", "/loopguard/api/sessions/loop-a", ""},
		{"POST", "/loopguard/api/sessions/loop-a/mode", `{"mode":"shadow"}`},
		{"POST", "/loopguard/api/sessions/loop-a/mode", `{"mode":null}`},
		{"POST", "/loopguard/api/sessions/%00/reset", ""},
		{"GET", "/loopguard/api/stats?model=%ff", ""},
		{"GET", "/loopguard/../../etc/passwd", ""},
	} {
		f.Add(s.method, s.target, s.body)
	}
	o, _, _, _ := newTestObserver(f, Options{})
	o.Request(RequestInfo{Session: "loop-a", Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p")})
	a, err := NewAdmin(o.Recorder(), AdminOptions{Control: &fakeControl{}, States: fakeStates{}})
	if err != nil {
		f.Fatal(err)
	}
	ok := map[int]bool{200: true, 301: true, 400: true, 404: true, 405: true}
	f.Fuzz(func(t *testing.T, method, target, body string) {
		if strings.HasPrefix(target, "/loopguard/api/events") || !strings.HasPrefix(target, "/") {
			return // the live feed streams until cancelled
		}
		switch method {
		case "GET", "POST", "HEAD", "DELETE":
		default:
			return
		}
		r, err := http.NewRequest(method, "http://127.0.0.1"+target, strings.NewReader(body))
		if err != nil {
			return
		}
		if strings.HasPrefix(r.URL.Path, "/loopguard/api/events") {
			return
		}
		w := httptest.NewRecorder()
		a.ServeHTTP(w, r.WithContext(localRequest("GET", "/", "", loopback).Context()))
		if !ok[w.Code] {
			t.Errorf("%s %q = %d", method, target, w.Code)
		}
	})
}
