package config

import (
	"github.com/loopguard/loopguard/judge"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/proxy"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestExampleDocumentsEveryKey keeps config.example.toml true: it decodes to
// the defaults (but for the example upstream) and names every key.
func TestExampleDocumentsEveryKey(t *testing.T) {
	const path = "../config.example.toml"
	got, err := LoadFile(path)
	if err != nil {
		t.Fatalf("LoadFile(%s): %v", path, err)
	}
	want := proxy.DefaultConfig()
	want.Upstream.URL = got.Upstream.URL
	for _, sec := range []struct {
		name      string
		got, want any
	}{
		{"server", got.Server, want.Server}, {"upstream", got.Upstream, want.Upstream},
		{"stream", got.Stream, want.Stream}, {"log", got.Log, want.Log}, {"admin", got.Admin, want.Admin},
		{"detect", got.Detect, want.Detect}, {"policy", got.Policy, want.Policy}, {"inject", got.Inject, want.Inject},
		{"judge", got.Judge, want.Judge},
	} {
		if !reflect.DeepEqual(sec.got, sec.want) {
			t.Errorf("%s: [%s] does not state the defaults:\n got %+v\nwant %+v", path, sec.name, sec.got, sec.want)
		}
	}
	text, _ := os.ReadFile(path)
	walk(reflect.ValueOf(&want).Elem(), nil, func(p []string, _ reflect.Value) {
		key := p[len(p)-1]
		if !strings.Contains(string(text), key+" = ") {
			t.Errorf("%s does not document %s", path, strings.Join(p, "."))
		}
	})
}

func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.toml")
	os.WriteFile(file, []byte("[upstream]\nurl = \"http://file:1\"\nidle_timeout = \"7s\"\n[server]\nlisten = \"127.0.0.1:1\"\n[policy]\nladder = [\"warn\", \"terminate\"]\n"), 0o644)
	cfg, err := Load("t", []string{"-config", file, "-listen", "127.0.0.1:3"}, env(map[string]string{
		"LOOPGUARD_UPSTREAM":                     "http://env:2",
		"LOOPGUARD_DETECT_REPEAT_CONSECUTIVE":    "7",
		"LOOPGUARD_POLICY_MODE":                  "shadow",
		"LOOPGUARD_UPSTREAM_CONNECT_TIMEOUT":     "250ms",
		"LOOPGUARD_DETECT_IGNORE":                "a, b",
		"LOOPGUARD_DETECT_STREAM_REPEATS":        "9",
		"LOOPGUARD_POLICY_ALLOW_CLIENT_OVERRIDE": "true",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"upstream.url (env over file)", cfg.Upstream.URL, "http://env:2"},
		{"upstream.idle_timeout (file)", cfg.Upstream.IdleTimeout, 7 * time.Second},
		{"server.listen (flag over file)", cfg.Server.Listen, "127.0.0.1:3"},
		{"detect.repeat_consecutive (env)", cfg.Detect.RepeatConsecutive, 7},
		{"policy.mode (env)", string(cfg.Policy.Mode), "shadow"},
		{"upstream.connect_timeout (env)", cfg.Upstream.ConnectTimeout, 250 * time.Millisecond},
		{"detect.ignore (env list)", cfg.Detect.Ignore, []string{"a", "b"}},
		{"detect.stream.repeats (nested env)", cfg.Detect.Stream.Repeats, 9},
		{"policy.allow_client_override (env bool)", cfg.Policy.AllowClientOverride, true},
		{"policy.ladder (file list)", len(cfg.Policy.Ladder), 2},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v; want %v", c.name, c.got, c.want)
		}
	}
}

func TestLoadErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"no upstream", nil, nil, []string{"upstream.url"}},
		{"bad url", []string{"-upstream", "ftp://x"}, nil, []string{"upstream.url"}},
		{"unknown key", []string{"-config", write("u.toml", "[upstream]\nurl=\"http://x\"\nurll=1\n")}, nil, []string{"upstream.urll"}},
		{"bad toml", []string{"-config", write("b.toml", "[upstream\n")}, nil, []string{"b.toml"}},
		{"bad env", []string{"-upstream", "http://x"}, map[string]string{"LOOPGUARD_UPSTREAM_IDLE_TIMEOUT": "soon"}, []string{"upstream.idle_timeout", "LOOPGUARD_UPSTREAM_IDLE_TIMEOUT"}},
		{"several at once", []string{"-config", write("s.toml", "[upstream]\nurl=\"http://x\"\nmax_conns=0\n[detect]\nwindow=-1\n[policy]\nmode=\"loud\"\n")}, nil,
			[]string{"upstream.max_conns", "detect.window", "policy.mode"}},
		{"several kinds at once", []string{"-config", write("k.toml", "[upstream]\nurl=\"http://x\"\nidle_timeout=\"soon\"\nurll=1\n[detect]\nwindow=\"wide\"\n[detect.tools.bash]\nrepeat_consecutiv=4\n[policy]\nmode=\"loud\"\n[extra]\nx=1\n")}, nil,
			[]string{"upstream.idle_timeout", "upstream.urll", "detect.window", "detect.tools.bash.repeat_consecutiv", "policy.mode", "extra"}},
		{"judge without a model", []string{"-config", write("j.toml", "[upstream]\nurl=\"http://x\"\n[judge]\nenabled=true\ntimeout=\"0s\"\n")}, nil,
			[]string{"judge.model", "judge.timeout"}},
		{"missing file", []string{"-config", filepath.Join(dir, "nope.toml")}, nil, []string{"nope.toml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("t", tt.args, env(tt.env), io.Discard)
			if err == nil {
				t.Fatal("Load succeeded; want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestJudgeConfig: the [judge] table is the optional judge's, off by
// default; turned on with a model it loads with its defaults and the
// environment's overrides.
func TestJudgeConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "j.toml")
	os.WriteFile(file, []byte("[upstream]\nurl = \"http://x\"\n[judge]\nenabled = true\nmodel = \"m\"\ntimeout = \"2s\"\n"), 0o644)
	cfg, err := Load("t", []string{"-config", file}, env(map[string]string{"LOOPGUARD_JUDGE_EVERY": "3"}), io.Discard)
	if err != nil {
		t.Fatalf("Load with [judge] = %v; want it loaded", err)
	}
	want := judge.DefaultConfig()
	want.Enabled, want.Model, want.Timeout, want.Every = true, "m", 2*time.Second, 3
	if cfg.Judge != want {
		t.Errorf("Load: judge = %+v; want %+v", cfg.Judge, want)
	}
	if d := proxy.DefaultConfig().Judge; d.Enabled {
		t.Errorf("DefaultConfig().Judge.Enabled = true; want the judge off by default")
	}
}

// TestPprofFlag: [admin] pprof is off by default; -pprof turns it on and
// -pprof=false turns off what the file or the environment turned on.
func TestPprofFlag(t *testing.T) {
	dir := t.TempDir()
	on := filepath.Join(dir, "on.toml")
	os.WriteFile(on, []byte("[admin]\npprof = true\n"), 0o644)
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", nil, nil, false},
		{"flag", []string{"-pprof"}, nil, true},
		{"file", []string{"-config", on}, nil, true},
		{"env", nil, map[string]string{"LOOPGUARD_ADMIN_PPROF": "true"}, true},
		{"flag over file", []string{"-config", on, "-pprof=false"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load("t", append([]string{"-upstream", "http://x"}, tt.args...), env(tt.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Admin.Pprof != tt.want {
				t.Errorf("admin.pprof = %v; want %v", cfg.Admin.Pprof, tt.want)
			}
		})
	}
}
