package llamaserver

import (
	"os"
	"path/filepath"
	"testing"
)

// A missing llama-server skips the test on a fresh clone and fails it where
// CI requires it or a directory was named for it.
func TestMissingFails(t *testing.T) {
	tests := []struct {
		name string
		give map[string]string
		want bool
	}{
		{name: "nothing set", give: nil, want: false},
		{name: "required", give: map[string]string{EnvRequire: "1"}, want: true},
		{name: "required off", give: map[string]string{EnvRequire: "0"}, want: false},
		{name: "directory named", give: map[string]string{EnvDir: "/opt/llama"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.give[k] }
			if got := missingFails(getenv); got != tt.want {
				t.Errorf("missingFails(%v) = %v; want %v", tt.give, got, tt.want)
			}
		})
	}
}

// With no llama-server to be found and nothing requiring it, Start skips.
func TestStartSkipsWhenMissing(t *testing.T) {
	t.Setenv(EnvRequire, "")
	t.Setenv(EnvDir, "")
	// A module of its own in a fresh directory: nothing beside it.
	dir := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var skipped bool
	t.Run("start", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Start(t, Options{})
		t.Error("Start returned without a llama-server")
	})
	if !skipped {
		t.Error("Start did not skip")
	}
}
