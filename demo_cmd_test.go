package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestRunDemoCommand(t *testing.T) {
	tests := []struct {
		name     string
		give     []string
		wantCode int
		wantOut  []string // substrings of stdout, in order
		wantErr  string   // substring of stderr
	}{
		{name: "scripted run", give: []string{"demo", "-no-color"}, wantCode: 0,
			wantOut: []string{"Scenario 1", "WARN", "CONSTRAIN", "TERMINATE", "LOOP_DETECTED:",
				"Scenario 2", "Scenario 3", "STREAM CUT", "loopguard demo -serve"}},
		{name: "help", give: []string{"demo", "-h"}, wantCode: 0, wantErr: "usage: loopguard demo"},
		{name: "unknown flag", give: []string{"demo", "-nope"}, wantCode: 2, wantErr: "-nope"},
		{name: "stray argument", give: []string{"demo", "extra"}, wantCode: 2, wantErr: `unexpected argument "extra"`},
		{name: "bad listen address", give: []string{"demo", "-serve", "-listen", "127.0.0.1:-1"}, wantCode: 1,
			wantErr: "listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(tt.give, &stdout, &stderr); got != tt.wantCode {
				t.Fatalf("run(%q) = %d; want %d\nstdout:\n%s\nstderr:\n%s", tt.give, got, tt.wantCode, stdout.String(), stderr.String())
			}
			out := stdout.String()
			for _, w := range tt.wantOut {
				i := strings.Index(out, w)
				if i < 0 {
					t.Fatalf("run(%q) stdout lacks %q after the previous checks:\n%s", tt.give, w, stdout.String())
				}
				out = out[i+len(w):]
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("run(%q) stderr = %q; want it to contain %q", tt.give, stderr.String(), tt.wantErr)
			}
			// A buffer is not a terminal: no colour.
			if strings.Contains(stdout.String(), "\x1b[") {
				t.Errorf("run(%q) wrote ANSI escapes to a buffer", tt.give)
			}
		})
	}
}

// `loopguard demo -model ADDR` serves the scripted model alone: an
// OpenAI-compatible upstream for loopguards run apart (deploy/compose.yaml).
func TestServeModel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- serveModel(ctx, ln, &stdout) }()
	base := "http://" + ln.Addr().String()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"any-model","messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"choices"`) {
		t.Errorf("chat completion: status %d: %s; want an OpenAI answer", resp.StatusCode, body)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("serveModel = %d after its context ended; want 0", c)
	}
	if !strings.Contains(stdout.String(), base+"/v1") {
		t.Errorf("stdout %q does not name %s/v1", stdout.String(), base)
	}
}
