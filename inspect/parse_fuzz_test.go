package inspect

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bodies to Parse and Inspect: neither may panic,
// and a body Parse accepts must inspect cleanly.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/parse/*.json")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add(build(rep(3, "bash:git status=>clean")...))
	f.Add([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"x","arguments":"{\"a\":\"\\ud800\"}"}}]}]}`))
	e, _ := NewEngine(DefaultConfig())
	f.Fuzz(func(t *testing.T, body []byte) {
		tr, err := Parse(body)
		if err != nil {
			return
		}
		if tr.Start < 0 || tr.Start > len(tr.Steps) {
			t.Fatalf("Start = %d out of [0,%d]", tr.Start, len(tr.Steps))
		}
		v := e.Inspect(tr)
		_ = v.Brief() + v.Summary() + v.Full()
	})
}
