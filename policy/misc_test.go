package policy

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/loopguard/loopguard/inspect"
	"github.com/rs/zerolog"
)

func TestNewSince(t *testing.T) {
	pt := &Pattern{Seen: 4, Messages: 12}
	tests := []struct {
		name string
		give position
		want bool
	}{
		{name: "same request again", give: position{step: 4, messages: 12}, want: false},
		{name: "a new step", give: position{step: 5, messages: 14}, want: true},
		{name: "history compacted by the agent", give: position{step: 1, messages: 5}, want: true},
		{name: "unknown history", give: position{step: -1}, want: false},
	}
	for _, tt := range tests {
		if got := pt.newSince(tt.give); got != tt.want {
			t.Errorf("%s: newSince(%+v) = %v; want %v", tt.name, tt.give, got, tt.want)
		}
	}
}

func TestResetSession(t *testing.T) {
	ctx := context.Background()
	p := New(DefaultConfig(), nil, zerolog.Nop())
	r := loopReq(3, true)
	_, _ = p.Decide(ctx, "s", r.verdict(), r.trajectory(), ModeEnforce)
	_ = p.SetMode(ctx, "s", ModeShadow)
	if err := p.ResetSession(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	st, _ := p.Store().Load(ctx, "s")
	if len(st.Patterns) != 0 || len(st.Interventions) != 0 || st.Mode != ModeShadow {
		t.Fatalf("state after reset = %+v; want no patterns or interventions, mode override kept", st)
	}
}

func TestNewStore(t *testing.T) {
	tests := []struct {
		name    string
		give    Config
		want    string
		wantErr bool
	}{
		{name: "zero config is memory", give: Config{}, want: "*policy.MemoryStore"},
		{name: "redis", give: Config{Store: StoreRedis, RedisURL: "redis://127.0.0.1:1/0"}, want: "*policy.RedisStore"},
		{name: "bad redis url", give: Config{Store: StoreRedis, RedisURL: "redis://:bad:port/x"}, wantErr: true},
		{name: "unknown store", give: Config{Store: "etcd"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewStore(tt.give)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewStore error = %v; want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			p := New(tt.give, s, zerolog.Nop())
			defer p.Close()
			if got := typeName(p.Store()); got != tt.want {
				t.Fatalf("NewStore = %s; want %s", got, tt.want)
			}
		})
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *MemoryStore:
		return "*policy.MemoryStore"
	case *RedisStore:
		return "*policy.RedisStore"
	}
	return "?"
}

func TestPatternKeyFallback(t *testing.T) {
	v := loopReq(3, true).verdict()
	v.PatternKey = ""
	k1 := patternKey(v)
	v.Detections[0].Evidence.Args = `{"command":"git diff"}`
	k2 := patternKey(v)
	if !strings.HasPrefix(k1, "p:tool_repetition:") || k1 == k2 {
		t.Fatalf("patternKey without PatternKey = %q, %q; want distinct category-prefixed keys", k1, k2)
	}
	p := New(DefaultConfig(), nil, zerolog.Nop())
	d, _ := p.Decide(context.Background(), "s", v, loopReq(3, true).trajectory(), ModeEnforce)
	if d.Pattern != k2 || d.Action != Warn {
		t.Fatalf("Decide without PatternKey = %q %s; want %q warn", d.Pattern, d.Action, k2)
	}
}

func TestBriefFallback(t *testing.T) {
	tests := []struct {
		name string
		ev   inspect.Evidence
		want string
	}{
		{name: "element", ev: inspect.Evidence{Element: "bash(ls)", Count: 4}, want: "bash(ls) x4"},
		{name: "tool and args", ev: inspect.Evidence{Tool: "read", Args: `{"path":"a"}`}, want: `read({"path":"a"})`},
		{name: "category only", ev: inspect.Evidence{}, want: "tool_repetition"},
	}
	for _, tt := range tests {
		v := inspect.Verdict{Loop: true, Category: inspect.ToolRepetition} // no detections: Brief() is ""
		if got := brief(v, tt.ev); got != tt.want {
			t.Errorf("%s: brief = %q; want %q", tt.name, got, tt.want)
		}
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", maxText) // 2 bytes each
	got := clip(s)
	if len(got) > maxText || !utf8.ValidString(got) {
		t.Fatalf("clip = %d bytes, valid %v; want <= %d bytes of valid UTF-8", len(got), utf8.ValidString(got), maxText)
	}
	if clip("short") != "short" {
		t.Fatal("clip changed a short string")
	}
}
