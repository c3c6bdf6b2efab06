package inspect

import "testing"

// TestEngineIgnored: the engine's lookup of ignored tools answers as
// Config.ignored's folding does, for ASCII and other names and lists.
func TestEngineIgnored(t *testing.T) {
	names := []string{"todo_write", "TodoWrite", "TODOWRITE", "todowrite", "Todo_Write", "think", "THINK", "thinking", "bash", "",
		"kill", "Kill", "\u212Aill", "ſearch", "search", "SEARCH", "naïve", "NAÏVE", "x" + string(make([]byte, 70)),
		"xodo_write", "todo_writx", "Thinx", "thinK"}
	for _, tt := range []struct {
		name   string
		ignore []string
		tools  map[string]ToolOverride
	}{
		{"default", DefaultConfig().Ignore, nil},
		{"none", nil, nil},
		{"non-ASCII list", []string{"\u212Aill", "naïve"}, nil},
		{"ASCII list, folded names", []string{"kill", "search"}, nil},
		{"per tool", []string{"think"}, map[string]ToolOverride{"bash": {Ignore: true}, "Kill": {Ignore: true}, "grep": {}}},
		{"per tool, none ignored", []string{"think"}, map[string]ToolOverride{"bash": {RepeatInWindow: 9}}},
		{"empty name", []string{"", "think"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Ignore, cfg.Tools = tt.ignore, tt.tools
			e, err := NewEngine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if got, want := e.ignored(n), cfg.ignored(n); got != want {
					t.Errorf("ignored(%q) = %v, want %v", n, got, want)
				}
			}
		})
	}
}
