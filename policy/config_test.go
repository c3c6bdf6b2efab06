package policy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func TestDefaultConfigValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v; want nil", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("Config{}.Validate() = %v; want nil (zero means defaults)", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
		want []string // keys named in the error
	}{
		{name: "bad mode", give: func(c *Config) { c.Mode = "loud" }, want: []string{"mode"}},
		{name: "bad ladder entries", give: func(c *Config) { c.Ladder = []Action{Warn, "scold", Terminate, Warn} }, want: []string{"ladder[1]", "ladder[3]"}},
		{name: "redis without url", give: func(c *Config) { c.Store = StoreRedis }, want: []string{"redis_url"}},
		{name: "bad store", give: func(c *Config) { c.Store = "etcd" }, want: []string{"store"}},
		{name: "bad url scheme", give: func(c *Config) { c.RedisURL = "http://x" }, want: []string{"redis_url"}},
		{name: "bad header", give: func(c *Config) { c.SessionHeader = "X Session" }, want: []string{"session_header"}},
		{name: "bad header in the list", give: func(c *Config) { c.SessionHeaders = []string{"session-id", "a:b"} }, want: []string{"session_headers[1]"}},
		{name: "negatives reported together", give: func(c *Config) {
			c.MaxSessions, c.TTL, c.StoreTimeout, c.GlobalSessions, c.GlobalWindow = -1, -1, -1, -1, -1
		}, want: []string{"max_sessions", "ttl", "store_timeout", "global_sessions", "global_window"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.give(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil; want errors naming %v", tt.want)
			}
			for _, k := range tt.want {
				if !strings.Contains(err.Error(), "policy: "+k+":") {
					t.Errorf("Validate() = %v; want it to name %s", err, k)
				}
			}
		})
	}
}

func TestConfigValidateRedactsPassword(t *testing.T) {
	c := DefaultConfig()
	c.RedisURL = "http://user:hunter2@host"
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Validate() = %v; want an error without the password", err)
	}
}

func TestConfigTOML(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "policy.toml"))
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if _, err := toml.Decode(string(b), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeShadow || !c.AllowClientOverride || c.ResetOnConstrain ||
		!slices.Equal(c.Ladder, []Action{Warn, Reset, Terminate}) ||
		c.TTL != 2*time.Hour || c.StoreTimeout != 80*time.Millisecond || c.GlobalWindow != 5*time.Minute ||
		c.Store != StoreRedis || c.RedisURL != "redis://127.0.0.1:6379/2" || c.MaxSessions != 500 ||
		c.SessionHeader != "X-Agent-Session" || c.GlobalSessions != 3 {
		t.Fatalf("decoded config = %+v; want the values of testdata/policy.toml", c)
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		give   string
		want   Mode
		wantOK bool
	}{
		{"enforce", ModeEnforce, true}, {"SHADOW", ModeShadow, true}, {" off ", ModeOff, true},
		{"", "", false}, {"on", "", false},
	}
	for _, tt := range tests {
		if got, ok := ParseMode(tt.give); got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}
