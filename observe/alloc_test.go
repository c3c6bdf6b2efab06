//go:build !race

package observe

import (
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
	"github.com/rs/zerolog"
)

// TestHotPathAllocations is the allocation budget of the hot path: once a
// session and its label combinations are known, observing a request costs
// no allocation, with or without a detection.
func TestHotPathAllocations(t *testing.T) {
	tests := []struct {
		name     string
		decision *policy.Decision
	}{
		{"no loop", &policy.Decision{Action: policy.None, Level: -1}},
		{"reapplied constraint", func() *policy.Decision {
			d := loopDecision(inspect.ToolRepetition, policy.Constrain, 1, "p")
			d.Reapplied = true
			return d
		}()},
		{"no decision", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := New(nil, zerolog.Nop(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			req, resp := benchInfos()
			req.Decision = tt.decision
			hotPath(o, req, resp)
			if n := testing.AllocsPerRun(100, func() { hotPath(o, req, resp) }); n != 0 {
				t.Errorf("Request+Response allocate %v times per request; want 0", n)
			}
		})
	}
}

// TestAdminEndpointsFast checks the dashboard's data endpoints answer within
// budget with 10,000 sessions (the benchmark gives exact figures).
func TestAdminEndpointsFast(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 10,000 sessions")
	}
	o, err := New(nil, zerolog.Nop(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	fill(o, 10000)
	a, err := NewAdmin(o.Recorder(), AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"/loopguard/api/sessions?limit=200", "/loopguard/api/stats", "/loopguard/api/sessions/session-00300"} {
		r := testing.Benchmark(func(b *testing.B) {
			for b.Loop() {
				a.ServeHTTP(discardWriter{}, localRequest("GET", target, "", loopback))
			}
		})
		if per := r.NsPerOp(); per > 50e6 {
			t.Errorf("GET %s takes %.1fms; want < 50ms", target, float64(per)/1e6)
		}
	}
}
