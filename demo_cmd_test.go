package main

import (
	"bytes"
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
