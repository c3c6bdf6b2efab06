package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunAgentCommand(t *testing.T) {
	// A real file without the execute bit, as a shell would meet it.
	notExecutable := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		give     []string
		wantCode int
		wantOut  string // stdout, exactly: the command's own
		wantErr  []string
	}{
		{name: "the command's output and exit code", give: []string{"run", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3"},
			wantCode: 3, wantOut: "hi\n", wantErr: []string{"loopguard: session run-", "log: ", "oops\n", "0 model calls, exit code 3", "no loop seen"}},
		{name: "the command sees the proxy, the CA and only the base URLs it had", give: []string{"run", "-session", "s-2", "--", "sh", "-c",
			`case "$HTTPS_PROXY $https_proxy $NO_PROXY" in "http://loopguard:"*"@127.0.0.1:"*" http://loopguard:"*" localhost,127.0.0.1,::1"*) ;; *) exit 9;; esac
			grep -q "BEGIN CERTIFICATE" "$NODE_EXTRA_CA_CERTS" && test -z "$OPENAI_BASE_URL$ANTHROPIC_BASE_URL" || exit 8`},
			wantCode: 0, wantErr: []string{"session s-2", "intercepting the model hosts through http://127.0.0.1:"}},
		{name: "-intercept=false: the command sees the session's base URLs", give: []string{"run", "-intercept=false", "-session", "s-1", "--", "sh", "-c",
			`case "$OPENAI_BASE_URL $ANTHROPIC_BASE_URL" in *"/s/s-1/v1 "*"/s/s-1") exit 0;; esac; exit 9`},
			wantCode: 0, wantErr: []string{"session s-1"}},
		{name: "a command killed by a signal", give: []string{"run", "--", "sh", "-c", "kill -TERM $$"},
			wantCode: 143, wantErr: []string{"exit code 143"}},
		{name: "no command", give: []string{"run"}, wantCode: 2, wantErr: []string{"usage: loopguard run"}},
		{name: "help", give: []string{"run", "-h"}, wantCode: 0, wantErr: []string{"usage: loopguard run"}},
		{name: "bad session id", give: []string{"run", "-session", "a/b", "--", "true"}, wantCode: 1,
			wantErr: []string{`-session "a/b"`, "only letters, digits"}},
		{name: "command not found", give: []string{"run", "--", "/nonexistent/agent"}, wantCode: 127,
			wantErr: []string{"start /nonexistent/agent"}},
		{name: "command not on PATH", give: []string{"run", "--", "loopguard-no-such-agent"}, wantCode: 127,
			wantErr: []string{"start loopguard-no-such-agent"}},
		{name: "command not executable", give: []string{"run", "--", notExecutable}, wantCode: 126,
			wantErr: []string{"start " + notExecutable}},
		{name: "command is a directory", give: []string{"run", "--", os.TempDir()}, wantCode: 126,
			wantErr: []string{"start " + os.TempDir()}},
		{name: "bad upstream", give: []string{"run", "-upstream", "ftp://x", "--", "true"}, wantCode: 1,
			wantErr: []string{"upstream.url"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir()) // the run's log
			var stdout, stderr bytes.Buffer
			if got := run(tt.give, &stdout, &stderr); got != tt.wantCode {
				t.Fatalf("run(%q) = %d; want %d\nstdout:\n%s\nstderr:\n%s", tt.give, got, tt.wantCode, &stdout, &stderr)
			}
			if stdout.String() != tt.wantOut {
				t.Errorf("stdout = %q; want %q", stdout.String(), tt.wantOut)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr misses %q:\n%s", w, &stderr)
				}
			}
		})
	}
}

func TestRunAgentJSON(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	path := filepath.Join(dir, "sum.json")
	var stdout, stderr bytes.Buffer
	if got := run([]string{"run", "-json", path, "-session", "j-1", "--", "true"}, &stdout, &stderr); got != 0 {
		t.Fatalf("run = %d\n%s", got, &stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"session": "j-1"`, `"exit_code": 0`, `"model_calls": 0`, `"loops": []`, `"ended_with_loop_detected": false`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("-json file misses %s:\n%s", w, b)
		}
	}
}

// TestRunAgentRemovesCA: the run's CA certificate is gone once the run
// ends.
func TestRunAgentRemovesCA(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	seen := filepath.Join(dir, "ca-path")
	var stdout, stderr bytes.Buffer
	if got := run([]string{"run", "--", "sh", "-c", `test -s "$NODE_EXTRA_CA_CERTS" && echo "$NODE_EXTRA_CA_CERTS" > ` + seen}, &stdout, &stderr); got != 0 {
		t.Fatalf("run = %d\n%s", got, &stderr)
	}
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	ca := strings.TrimSpace(string(b))
	if _, err := os.Stat(ca); !os.IsNotExist(err) {
		t.Errorf("the run's CA file %s: %v; want it removed", ca, err)
	}
	if _, err := os.Stat(filepath.Dir(ca)); !os.IsNotExist(err) {
		t.Errorf("the run's CA directory: %v; want it removed", err)
	}
}
