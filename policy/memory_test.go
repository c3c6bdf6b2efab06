package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/memtest"
	"github.com/rs/zerolog"
)

// TestStoredTextIsCopied: what the store keeps outlives the request by the
// session TTL, so none of it may be a substring of the request: a tool name
// would keep the whole body alive.
func TestStoredTextIsCopied(t *testing.T) {
	body := strings.Repeat("x", 1<<20) + `bash{"command":"git status"}bash(git status)k1session-1{"type":"message"}`
	at := func(s string) string { i := strings.Index(body, s); return body[i : i+len(s)] }
	v := inspect.Verdict{Loop: true, Category: inspect.ToolRepetition, Confidence: 0.95, PatternKey: at("k1"),
		Detections: []inspect.Detection{{Category: inspect.ToolRepetition, Score: 0.95, Evidence: inspect.Evidence{
			Element: at("bash(git status)"), Tool: at("bash"), Args: at(`{"command":"git status"}`), Count: 3, Threshold: 3, Last: 2, NoProgress: true}}}}
	// Room for every key in every shard: the shards are picked by a hash
	// with a random seed, and a full one would evict the session.
	store := NewMemoryStore(1024, 0)
	p := New(Config{}, store, zerolog.Nop())
	ctx := context.Background()
	d, err := p.Decide(ctx, at("session-1"), v, req{steps: 3}.trajectory(), ModeEnforce)
	if err != nil || d.Action != Warn {
		t.Fatalf("Decide = %v, %v; want warn", d.Action, err)
	}
	if err := p.SaveRecord(ctx, "r:resp_1", []string{at(`{"type":"message"}`)}); err != nil {
		t.Fatal(err)
	}
	st, _ := store.Load(ctx, "session-1")
	rec, _ := p.Record(ctx, "r:resp_1")
	texts := map[string]string{"Decision.Brief": d.Brief, "Decision.Pattern": d.Pattern}
	for k, pt := range st.Patterns {
		texts["pattern key"], texts["Pattern.Brief"], texts["Pattern.Summary"] = k, pt.Brief, pt.Summary
		texts["Pattern.Tool"], texts["Pattern.Args"] = pt.Tool, pt.Args
	}
	for _, iv := range st.Interventions {
		texts["Intervention.Pattern"], texts["Intervention.Brief"] = iv.Pattern, iv.Brief
	}
	for _, it := range rec {
		texts["record item"] = it
	}
	for i := range store.shards {
		for k := range store.shards[i].items {
			texts["store key"] = k
		}
	}
	if len(texts) != 11 {
		t.Fatalf("found %d stored texts %v; want 11", len(texts), texts)
	}
	for name, s := range texts {
		if memtest.Within(s, body) {
			t.Errorf("%s %q is a substring of the request", name, s)
		}
	}
}
