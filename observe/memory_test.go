package observe

import (
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/memtest"
	"github.com/loopguard/loopguard/policy"
	"github.com/rs/zerolog"
)

// TestRecorderCopiesNames: sessions and their timelines outlive the request
// whose session key, model and tool names are substrings.
func TestRecorderCopiesNames(t *testing.T) {
	body := strings.Repeat("x", 1<<20) + "session-1gpt-4obash"
	at := func(s string) string { i := strings.Index(body, s); return body[i : i+len(s)] }
	o, err := New(nil, zerolog.Nop(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.Request(RequestInfo{Session: at("session-1"), Model: at("gpt-4o"), Tool: at("bash"), Steps: 3,
		Decision: loopDecision(inspect.ToolRepetition, policy.Warn, 0, "p")})
	sum, timeline, ok := o.Recorder().Session("session-1")
	if !ok || len(timeline) == 0 {
		t.Fatalf("Session(session-1) = %v, %d entries; want the session", ok, len(timeline))
	}
	texts := map[string]string{"summary key": sum.Key, "summary model": sum.Model}
	for _, e := range timeline {
		texts["entry session"], texts["entry model"], texts["entry tool"] = e.Session, e.Model, e.Tool
	}
	for k := range o.Recorder().sessions {
		texts["session map key"] = k
	}
	for name, s := range texts {
		if s == "" || memtest.Within(s, body) {
			t.Errorf("%s %q is empty or a substring of the request", name, s)
		}
	}
}
