package inspect

import (
	"errors"
	"strings"
	"testing"
)

// TestInspectReportsDetectorPanic: a detector bug fails open (no loop) and
// says so, so the proxy can count and log it instead of losing it.
func TestInspectReportsDetectorPanic(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := e.Parse([]byte(`{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"secret-arg\"}"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	saved := detectors
	t.Cleanup(func() { detectors = saved })
	tests := []struct {
		name  string
		panic func(*inspection)
	}{
		{"runtime error", func(in *inspection) { _ = in.t.Steps[len(in.t.Steps)+1] }},
		{"value quoting content", func(in *inspection) { panic("bad call " + in.t.Steps[0].Calls[0].Args) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			detectors = append(saved[:len(saved):len(saved)], detector{ToolRepetition, func(in *inspection) (Detection, bool) {
				tt.panic(in)
				return Detection{}, false
			}})
			v := e.Inspect(tr)
			if !errors.Is(v.Err, ErrDetector) || v.Loop {
				t.Fatalf("Inspect with a panicking detector = %+v; want no loop and Err wrapping ErrDetector", v)
			}
			if msg := v.Err.Error(); len(msg) == 0 || strings.Contains(msg, "secret-arg") {
				t.Errorf("Err = %q; want a description without the call's arguments", msg)
			}
		})
	}
	detectors = saved
	if v := e.Inspect(tr); v.Err != nil {
		t.Errorf("Inspect with the real detectors: Err = %v; want nil", v.Err)
	}
}
