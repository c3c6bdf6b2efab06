package inspect

import (
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct{ a, b string }{
		{"at 2024-05-06T10:11:12.123Z ok", "at 2025-01-01T00:00:00Z ok"},
		{"started 12:01:02", "started 23:59:59"},
		{"id 123e4567-e89b-12d3-a456-426614174000", "id 00000000-0000-0000-0000-000000000000"},
		{"commit 3f9a2b1c4d", "commit 9e8d7c6b5a"},
		{"done in 0.53s", "done in 12.1s"},
		{"took 12ms", "took 250ms"},
		{"finished in 3.2 seconds", "finished in 10 seconds"},
		{"pid 1234 running", "pid 99 running"},
		{"wrote /tmp/tmpab12cd/out.txt", "wrote /tmp/xyz987/out.txt"},
		{"\x1b[31mred\x1b[0m", "red"},
		{"line   \nnext\t", "line\nnext"},
		{"object at 0x7f3a2b1c9d00", "object at 0x7f00deadbeef"},
		{"Uvicorn running on http://127.0.0.1:53211", "Uvicorn running on http://127.0.0.1:40007"},
		{"listening on localhost:43121 (port 43121)", "listening on localhost:38002 (port 38002)"},
		{"e3b1c2a HEAD@{0}: commit: fix", "9f0d4e7 HEAD@{0}: commit: fix"},
		{"  40%|████      | 4/10 [00:01<00:02,  3.10it/s]\r100%|██████████| 10/10 [00:03<00:00,  3.21it/s]", "100%|██████████| 10/10 [00:02<00:00,  4.02it/s]"},
		{"Downloading x.whl (1.2 MB) 3.4 MB/s", "Downloading x.whl (1.2 MB) 12.9 MB/s"},
		{"query took 12 ms", "query took 315 ms"},
		{"Out[7]: 42", "Out[12]: 42"},
		{"Attempt 3: connection refused", "Attempt 4: connection refused"},
		{"saved /home/u/tmpk3j4h5z1/model.pt", "saved /home/u/tmp9qx_2b7a/model.pt"},
		// Values a label names as runtime detail, whatever their shape.
		{"Chunk ID: a1b2c3\nWall time: 0.0000 seconds\nProcess exited with code 1", "Chunk ID: 0f9e8d\nWall time: 0.0012 seconds\nProcess exited with code 1"},
		{`{"status":"error","exitCode":1,"durationMs":101,"cwd":"/work/run-7"}`, `{"status":"error","exitCode":1,"durationMs":97,"cwd":"/work/run-8"}`},
		{`{"requestId": "req_8fK2x", "took_ms": 12, "ok": false}`, `{"requestId": "req_q01Zt", "took_ms": 40, "ok": false}`},
		{"x-request-id=r-77 status=503", "x-request-id=r-102 status=503"},
		{"Time:        1.234 s\nTests: 3 failed", "Time:        0.98 s\nTests: 3 failed"},
		{"process_id: 4411 exited", "process_id: 4520 exited"},
		// Gemini CLI's run_shell_command result ends with its process group.
		{"Exit Code: 1\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 16543", "Exit Code: 1\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 17001"},
		{`created_at: "2024-05-01 10:00"`, `created_at: "2024-05-02 11:30"`},
		{"started 1732712400.123456 ok", "started 1732712461.9 ok"},
	}
	for _, tt := range tests {
		na, nb := string(appendNormalized(nil, tt.a)), string(appendNormalized(nil, tt.b))
		if na != nb {
			t.Errorf("normalise(%q) = %q, normalise(%q) = %q; want equal", tt.a, na, tt.b, nb)
		}
	}
	for _, d := range [][2]string{{"3 failed", "2 failed"}, {"line 10", "line 12"}, {"a.txt", "b.txt"},
		{"a.py:42: E501", "a.py:43: E501"}, {"10/10 tests", "9/10 tests"}, {"epoch 3 loss 0.41", "epoch 4 loss 0.38"},
		{"items[3]", "items[4]"}, {"entry 5", "entry 6"}, {"142.31 kB", "142.35 kB"},
		// Labels that name no runtime detail keep their values.
		{`{"exitCode":1}`, `{"exitCode":2}`}, {"ms: 3", "ms: 4"}, {"failed=3", "failed=2"}, {"std::id::x 1", "std::id::x 2"},
		{`{"id": {"a": 1}}`, `{"id": {"a": 2}}`}, {"grid: 3x3", "grid: 4x4"}} {
		if string(appendNormalized(nil, d[0])) == string(appendNormalized(nil, d[1])) {
			t.Errorf("normalise(%q) == normalise(%q); want different", d[0], d[1])
		}
	}
}

// TestResultWrappers: the wrappers agents put around a command's output
// are read through, so that the rules compare what the command printed.
func TestResultWrappers(t *testing.T) {
	long := strings.Repeat("checked ", 30) + "and the key was not found"
	tests := []struct {
		name       string
		give       string
		wantResult string // resultText
		wantOutput string // outputText
		wantNeg    bool   // negativeResult
	}{
		{"plain", "3 passed", "3 passed", "3 passed", false},
		{"empty", "  \n", "  \n", "", true},
		{"mini-swe-agent tags", "<returncode>1</returncode>\n<output>\nNo matches found\n</output>", "<returncode>1</returncode>\n<output>\nNo matches found\n</output>", "No matches found", true},
		{"mini-swe-agent, empty output", "<returncode>0</returncode>\n<output>\n\n</output>", "<returncode>0</returncode>\n<output>\n\n</output>", "", true},
		{"Codex JSON", `{"output":"a.go\n","metadata":{"exit_code":0,"duration_seconds":0.4}}`, "exit code 0\na.go\n", "a.go", false},
		{"Codex JSON, nothing found", `{"output":"","metadata":{"exit_code":1,"duration_seconds":1.2}}`, "exit code 1\n", "", true},
		{"JSON that is not Codex's", `{"output":"x"}`, `{"output":"x"}`, `{"output":"x"}`, false},
		{"not found", "Error: File not found: /w/a.txt", "Error: File not found: /w/a.txt", "Error: File not found: /w/a.txt", true},
		{"a long output that mentions not found", long, long, long, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resultText(tt.give); got != tt.wantResult {
				t.Errorf("resultText(%q) = %q; want %q", tt.give, got, tt.wantResult)
			}
			if got := outputText(tt.give); got != tt.wantOutput {
				t.Errorf("outputText(%q) = %q; want %q", tt.give, got, tt.wantOutput)
			}
			if got := negativeResult(tt.give); got != tt.wantNeg {
				t.Errorf("negativeResult(%q) = %v; want %v", tt.give, got, tt.wantNeg)
			}
		})
	}
}
