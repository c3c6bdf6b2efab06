package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/rs/zerolog"
)

// requestPrefix returns the chat request of testdata/name cut after the
// first n assistant/tool pairs, as the agent sent it at that point.
func requestPrefix(t *testing.T, name string, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var req map[string]any
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	msgs := req["messages"].([]any)
	req["messages"] = msgs[:min(len(msgs), 2+2*n)]
	out, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPipelineWithInspect runs the real inspect engine over a growing
// git-status loop and walks the default ladder with its verdicts.
func TestPipelineWithInspect(t *testing.T) {
	eng, err := inspect.NewEngine(inspect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := New(DefaultConfig(), nil, zerolog.Nop())
	ctx := context.Background()
	var first Action
	seen := map[Action]int{}
	key := ""
	for n := 1; n <= 7; n++ {
		body := requestPrefix(t, "git_status_loop.json", n)
		if k := chatKey(nil, body); key == "" {
			key = k
		} else if k != key {
			t.Fatalf("request %d: session key %q; want %q (same run)", n, k, key)
		}
		tr, err := eng.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		v := eng.Inspect(tr)
		d, err := p.Decide(ctx, key, v, tr, ModeEnforce)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Loop {
			if d.Action != None {
				t.Fatalf("request %d: no loop but Action %s", n, d.Action)
			}
			continue
		}
		if first == "" {
			first = d.Action
		}
		seen[d.Action]++
		if d.Pattern != v.PatternKey || d.Brief == "" {
			t.Fatalf("request %d: Pattern %q, Brief %q; want the verdict's key and a brief", n, d.Pattern, d.Brief)
		}
	}
	if first != Warn || seen[Constrain] != 1 || seen[Terminate] == 0 {
		t.Fatalf("actions: first %s, counts %v; want warn first, one constrain, then terminate", first, seen)
	}
}
