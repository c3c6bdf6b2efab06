package intercept

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEListsModelHosts: README.md's table of the model hosts is
// ModelHosts, row for row.
func TestREADMEListsModelHosts(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, h := range ModelHosts {
		want = append(want, hostRow(h))
	}
	if !strings.Contains(string(b), strings.Join(want, "\n")+"\n") {
		t.Errorf("README.md does not list the model hosts as ModelHosts has them; its table should read:\n%s", strings.Join(want, "\n"))
	}
}

func TestHosts(t *testing.T) {
	r := Resolve{}
	if err := r.Set("Staging.Example.com=http://127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
	got := Hosts([]string{"gw.example.com:443", "CHATGPT.com"}, r)
	if len(got) != len(ModelHosts)+2 || got[len(got)-2] != "gw.example.com" || got[len(got)-1] != "staging.example.com" {
		t.Errorf("Hosts = %v; want ModelHosts, gw.example.com, staging.example.com once each", got)
	}
}

func TestResolve(t *testing.T) {
	r := Resolve{}
	for _, v := range []string{"api.anthropic.com=http://127.0.0.1:9", "chatgpt.com=https://staging.example.com/prefix/"} {
		if err := r.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	for _, bad := range []string{"api.anthropic.com", "=http://x", "h=ftp://x", "h=http://", "h:443=http://x", "h=http://x/?q=1"} {
		if err := r.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted it; want an error", bad)
		}
	}
	rewrites := []struct{ give, want string }{
		{"https://api.anthropic.com/v1", "http://127.0.0.1:9/v1"},
		{"https://API.anthropic.com", "http://127.0.0.1:9"},
		{"https://chatgpt.com/backend-api/codex", "https://staging.example.com/prefix/backend-api/codex"},
		{"https://api.openai.com/v1", "https://api.openai.com/v1"},
	}
	for _, tt := range rewrites {
		if got := r.Rewrite(tt.give); got != tt.want {
			t.Errorf("Rewrite(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
	bases := []struct{ give, want string }{
		{"api.anthropic.com:443", "http://127.0.0.1:9"},
		{"chatgpt.com:443", "https://staging.example.com/prefix"},
		{"api.openai.com:443", "https://api.openai.com"},
		{"api.openai.com:8443", "https://api.openai.com:8443"},
	}
	for _, tt := range bases {
		if got := r.BaseURL(tt.give); got != tt.want {
			t.Errorf("BaseURL(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
	if s := r.String(); s != "api.anthropic.com=http://127.0.0.1:9,chatgpt.com=https://staging.example.com/prefix" {
		t.Errorf("String() = %q", s)
	}
}
