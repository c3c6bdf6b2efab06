package main

import (
	"bytes"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// `loopguard -h` lists every subcommand run dispatches, each with its line,
// and the most used invocations; a bad flag or an unknown command shows the
// same list on stderr.
func TestHelpListsEveryCommand(t *testing.T) {
	tests := []struct {
		name     string
		give     []string
		wantCode int
		toStderr bool
	}{
		{name: "-h", give: []string{"-h"}},
		{name: "--help", give: []string{"--help"}},
		{name: "help", give: []string{"help"}},
		{name: "bad flag", give: []string{"-no-such-flag"}, wantCode: 2, toStderr: true},
		{name: "unknown command", give: []string{"srve"}, wantCode: 2, toStderr: true},
		{name: "help of an unknown command", give: []string{"help", "srve"}, wantCode: 2, toStderr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(tt.give, &stdout, &stderr); got != tt.wantCode {
				t.Fatalf("run(%q) = %d; want %d\nstderr:\n%s", tt.give, got, tt.wantCode, &stderr)
			}
			out := stdout.String()
			if tt.toStderr {
				out = stderr.String()
			}
			for _, c := range commands {
				if !regexp.MustCompile(`(?m)^  ` + c.name + ` +\S`).MatchString(out) {
					t.Errorf("run(%q) does not list %s with its line:\n%s", tt.give, c.name, out)
				}
			}
			if n := strings.Count(out, "\n  loopguard "); n < 3 {
				t.Errorf("run(%q) shows %d invocations; want the 3 most used:\n%s", tt.give, n, out)
			}
		})
	}
}

// Every command answers -h, and help COMMAND, with its own usage and
// flags, and exits 0.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		if c.run == nil {
			continue // help itself
		}
		for _, give := range [][]string{{c.name, "-h"}, {"help", c.name}} {
			t.Run(strings.Join(give, " "), func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				if got := run(give, &stdout, &stderr); got != 0 {
					t.Fatalf("run(%q) = %d; want 0\nstderr:\n%s", give, got, &stderr)
				}
				if out := stdout.String() + stderr.String(); !strings.Contains(out, "usage: loopguard "+c.name) {
					t.Errorf("run(%q) does not show loopguard %s's usage:\n%s", give, c.name, out)
				}
			})
		}
	}
}

// `loopguard version` and `-version` print the module version and the Go
// version.
func TestVersion(t *testing.T) {
	for _, give := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		t.Run(give[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(give, &stdout, &stderr); got != 0 {
				t.Fatalf("run(%q) = %d; want 0\nstderr:\n%s", give, got, &stderr)
			}
			out := stdout.String()
			if !strings.HasPrefix(out, "loopguard ") || !strings.Contains(out, " "+runtime.Version()+" ") {
				t.Errorf("run(%q) printed %q; want loopguard, its version and %s", give, out, runtime.Version())
			}
		})
	}
}
