package inspect

import (
	"fmt"
	"strings"
	"testing"
)

// jobStatus is a tool result long enough not to count as a short
// acknowledgement.
const jobStatus = "job 7 status\nstate: running\nshards copied: 3 of 9"

// interleave returns n copies of call, each followed by a different
// command, so that only the windowed repetition rule can count them.
func interleave(n int, call string) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, call, fmt.Sprintf("bash:ls dir%d=>file%d.go", i, i))
	}
	return out
}

// pages returns n calls of one tool with the same arguments, each
// answered with new output: paging through a command's output or a job's
// log (Roo Code #9502: an MCP read_output called 50 times).
func pages(n int, call string) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("%s=>line %d: copied shard %d of %d\nline %d: copying shard %d", call, 2*i, i, n, 2*i+1, i+1))
	}
	return out
}

// growing returns n calls of call answered with a listing one file
// longer each time.
func growing(n int, call string) []string {
	var out []string
	files := []string{"README.md", "config.yaml", "main.go"}
	for i := range n {
		files = append(files, fmt.Sprintf("part-%03d.parquet", i))
		out = append(out, call+"=>"+strings.Join(files, "\n"))
	}
	return out
}

// statusPolls returns n calls of call answered with the same job status
// but for its counters.
func statusPolls(n int, call string) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s=>NAME READY STATUS RESTARTS\napi-7f9c 0/1 CrashLoopBackOff %d\ndb-0 1/1 Running 0\nqueue-0 1/1 Running 0\nevents seen: %d", call, i+3, 40+i*7))
	}
	return out
}

// jsonPolls returns n calls of a job-status tool answered with compact
// JSON whose progress moves.
func jsonPolls(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(`get_job:{"id":"export-7"}=>{"job":"export-7","state":"running","progress":%d,"rows_written":%d}`, 10+i*3, 1000*(i+1)))
	}
	return out
}

// codexResult is a script line of Codex's exec_command answered as Codex
// 0.169 answers it: a chunk id and a wall time new on every run before
// the exit status and the output.
func codexResult(call string, run, exit int, output string) string {
	return fmt.Sprintf("%s=>Chunk ID: %06x\nWall time: 0.%04d seconds\nProcess exited with code %d\nOriginal token count: %d\nOutput:\n%s\n",
		call, 0xa1b2c3+run*7919, run*37%10000, exit, len(output)/4, output)
}

// codexRuns is n runs of call with the same exit status and output.
func codexRuns(n int, call string, exit int, output string) []string {
	var out []string
	for i := range n {
		out = append(out, codexResult(call, i, exit, output))
	}
	return out
}

func TestToolRepetition(t *testing.T) {
	notFound := "read_file:{\"absolute_path\":\"/repo/config.yaml\"}=>Error: File not found: /repo/config.yaml"
	runFamily(t, ToolRepetition, []familyCase{
		// The loop it exists for.
		{name: "repetition x3 same result", give: rep(3, "bash:git status=>clean"), want: stopped},
		{name: "reading a missing file x3 (gemini-cli #3919)", give: rep(3, notFound), want: stopped},
		{name: "same call, a different error each time (OpenHands repeating_action_error)", give: []string{
			"bash:python app.py=>bash: python: command not found",
			"bash:python app.py=>Traceback (most recent call last):\n  File \"app.py\", line 3\nImportError: No module named flask",
			"bash:python app.py=>Error: address already in use\nexit code 1"}, want: stopped},
		{name: "arguments in another key order (gemini-cli hashes JSON.stringify)", give: []string{
			`read_file:{"path":"a.go","limit":50}=>package a`, `read_file:{"limit":50,"path":"a.go"}=>package a`,
			`read_file:{ "path": "a.go", "limit": 50 }=>package a`}, want: stopped},
		{name: "task_progress changing on every call (Cline #9933)", give: []string{
			`read_file:{"path":"a.go","task_progress":"- [x] read"}=>package a`,
			`read_file:{"path":"a.go","task_progress":"- [x] read\n- [ ] fix"}=>package a`,
			`read_file:{"path":"a.go","task_progress":"- [ ] fix"}=>package a`}, want: stopped},
		{name: "thought text changing beside the same call (OpenHands #15087)", history: func() *conv {
			c := newConv(sysPrompt, "Fix the import in main.py")
			for _, say := range []string{"Let me look at the directory.", "I need to see the files first.", "Checking the directory layout again."} {
				c.call(say, "execute_bash", map[string]any{"command": "ls -l"}, "total 8\n-rw-r--r-- 1 u u 120 main.py\n-rw-r--r-- 1 u u 80 README.md")
			}
			return c
		}, want: stopped},
		{name: "one response of 6 identical parallel calls (goose #9136)", history: func() *conv {
			c := newConv(sysPrompt, "Run the build")
			calls := make([]tc, 6)
			for i := range calls {
				calls[i] = tc{"shell", map[string]any{"command": "mvn test"}, "[ERROR] Failed to execute goal: There are test failures."}
			}
			return c.parallel("", calls...)
		}, want: stopped},
		{name: "write with no change x3 (gemini-cli #3919)", give: rep(3, `write_file:{"path":"a.py","content":"x = 1\n"}=>No changes detected.`), want: stopped},
		{name: "same call x5 in the window, others between", give: interleave(5, "bash:cat status=>"+jobStatus), want: stopped},
		{name: "a long fixture: the same listing x4 after real work", fixture: "repetition/listing-after-work.json", want: stopped},
		{name: "Codex exec_command, a new chunk id and wall time each run", give: codexRuns(3, `exec_command:{"cmd":"cat missing_file.txt"}`, 1,
			"cat: missing_file.txt: No such file or directory"), want: stopped},
		{name: "exec JSON differing in duration, cwd and request id (openclaw-style)", give: []string{
			`exec:{"command":"npm test"}=>{"status":"completed","exitCode":1,"durationMs":1812,"cwd":"/tmp/oc-run-7","aggregated":"FAIL src/app.test.ts\n  1 failed"}`,
			`exec:{"command":"npm test"}=>{"status":"completed","exitCode":1,"durationMs":1745,"cwd":"/tmp/oc-run-8","aggregated":"FAIL src/app.test.ts\n  1 failed"}`,
			`exec:{"command":"npm test"}=>{"status":"completed","exitCode":1,"durationMs":1990,"cwd":"/tmp/oc-run-9","aggregated":"FAIL src/app.test.ts\n  1 failed"}`,
		}, want: stopped},
		{name: "OpenHands: the same output, a new temp working directory each time", give: []string{
			"execute_bash:{\"command\":\"python reproduce.py\"}=>Traceback (most recent call last):\nKeyError: 'id'\n[The command completed with exit code 1.]\n[Current working directory: /tmp/tmpa1b2c3d4/repo]\n[Command finished with exit code 1]",
			"execute_bash:{\"command\":\"python reproduce.py\"}=>Traceback (most recent call last):\nKeyError: 'id'\n[The command completed with exit code 1.]\n[Current working directory: /tmp/tmpz9y8x7w6/repo]\n[Command finished with exit code 1]",
			"execute_bash:{\"command\":\"python reproduce.py\"}=>Traceback (most recent call last):\nKeyError: 'id'\n[The command completed with exit code 1.]\n[Current working directory: /tmp/tmpq5r4s3t2/repo]\n[Command finished with exit code 1]",
		}, want: stopped},
		{name: "Claude Code: a background shell's new id and the test run's time", give: []string{
			`Bash:{"command":"npm test","description":"Run tests"}=>Command running in background with ID: bash_1` + "\n> jest\nTests: 2 failed, 5 total\nTime:        3.104 s",
			`Bash:{"command":"npm test","description":"Run tests"}=>Command running in background with ID: bash_2` + "\n> jest\nTests: 2 failed, 5 total\nTime:        2.871 s",
			`Bash:{"command":"npm test","description":"Run tests"}=>Command running in background with ID: bash_3` + "\n> jest\nTests: 2 failed, 5 total\nTime:        3.392 s",
		}, want: stopped},
		{name: "SWE-agent: the same listing, a new epoch timestamp each time", give: rep(1,
			"bash:python -c 'import time,os; print(time.time()); print(os.listdir())'=>1732712400.118842\n['setup.py', 'src']",
			"bash:python -c 'import time,os; print(time.time()); print(os.listdir())'=>1732712405.530211\n['setup.py', 'src']",
			"bash:python -c 'import time,os; print(time.time()); print(os.listdir())'=>1732712411.002917\n['setup.py', 'src']"), want: stopped},
		{name: "the same status JSON with a new request id and elapsed counter", give: []string{
			`http_get:{"url":"http://localhost:8080/health"}=>{"requestId":"a8Kq","elapsed":3,"status":"degraded","db":"down"}`,
			`http_get:{"url":"http://localhost:8080/health"}=>{"requestId":"Zx01","elapsed":5,"status":"degraded","db":"down"}`,
			`http_get:{"url":"http://localhost:8080/health"}=>{"requestId":"p9Wm","elapsed":8,"status":"degraded","db":"down"}`,
		}, want: stopped},

		// Healthy near-misses.
		// Polling that does nothing else: a warning at ten, never more.
		{name: "ls of a growing directory x10", give: growing(10, "bash:ls out/"), want: warned},
		{name: "ls of a growing directory x30", give: growing(30, "bash:ls out/"), want: warned},
		{name: "ls of a growing directory x9", give: growing(9, "bash:ls out/"), want: silent},
		{name: "a status poll whose counters move x12", give: statusPolls(12, `job_status:{"job":"build-7"}`), want: warned},
		{name: "a compact JSON job status, its progress moving, x10", give: jsonPolls(10), want: warned},
		{name: "a compact JSON job status, its progress moving, x9", give: jsonPolls(9), want: silent},
		{name: "a status poll that sleeps first x12", give: statusPolls(12, "bash:sleep 30; kubectl get pods"), want: silent},
		{name: "a status poll that sleeps first x30", give: statusPolls(30, "bash:sleep 30; kubectl get pods"), want: warned},
		{name: "repetition x2 only", give: rep(2, "bash:git status=>clean"), want: silent},
		{name: "OpenHands: the same script, its output changing", give: []string{
			"execute_bash:{\"command\":\"python reproduce.py\"}=>KeyError: 'id'\n[Current working directory: /tmp/tmpa1b2c3d4/repo]",
			"execute_bash:{\"command\":\"python reproduce.py\"}=>KeyError: 'name'\n[Current working directory: /tmp/tmpz9y8x7w6/repo]",
			"execute_bash:{\"command\":\"python reproduce.py\"}=>OK: 3 rows\n[Current working directory: /tmp/tmpq5r4s3t2/repo]",
		}, want: silent},
		{name: "Codex exec_command x3, the output changing", give: []string{
			codexResult(`exec_command:{"cmd":"pytest -q"}`, 0, 1, "3 failed, 9 passed"),
			codexResult(`exec_command:{"cmd":"pytest -q"}`, 1, 1, "2 failed, 10 passed"),
			codexResult(`exec_command:{"cmd":"pytest -q"}`, 2, 0, "12 passed")}, want: silent},
		{name: "polling with changing result", give: []string{"bash:st=>10%", "bash:st=>20%", "bash:st=>30%", "bash:st=>40%"}, want: silent},
		{name: "paging a command's output, same call x12 (Roo Code #9502)", give: pages(12, `read_output:{"pid":4242}`), want: silent},
		{name: "empty command reading a long command's output (OpenHands #10350)", give: pages(6, `execute_bash:{"command":""}`), want: silent},
		{name: "polling every 5 minutes x4, same answer (OpenHands SDK #762)", give: rep(4, "bash:sleep 300 && curl -s localhost:8080/job/7=>"+jobStatus), want: silent},
		{name: "same call x4 in the window, others between", give: interleave(4, "bash:cat status=>"+jobStatus), want: silent},
		{name: "genuine user resets", give: append(rep(3, "bash:git status=>clean"), "user:Thanks! Now add a README section about installation.", "bash:git status=>clean"), want: healthy},
		{name: "automated continue does not reset", give: append(rep(2, "bash:git status=>clean"), "user:please continue", "bash:git status=>clean"), want: stopped},
		{name: "ignored tool", give: rep(5, "todo_write:{\"todos\":[1]}=>ok"), want: silent},
		{name: "paging a file: same tool, other offsets", give: []string{
			`read_file:{"path":"big.go","offset":0,"limit":100}=>package big`, `read_file:{"path":"big.go","offset":100,"limit":100}=>func a() {}`,
			`read_file:{"path":"big.go","offset":200,"limit":100}=>func b() {}`, `read_file:{"path":"big.go","offset":300,"limit":100}=>func c() {}`}, want: silent},

		// Thresholds: a threshold of N fires at N, not at N-1.
		{name: "repeat_consecutive 4: x3", give: rep(3, "bash:git status=>clean"), cfg: func(c *Config) { c.RepeatConsecutive = 4 }, want: silent},
		{name: "repeat_consecutive 4: x4", give: rep(4, "bash:git status=>clean"), cfg: func(c *Config) { c.RepeatConsecutive = 4 }, want: stopped},
		{name: "repeat_in_window 6: x5", give: interleave(5, "bash:cat status=>"+jobStatus), cfg: func(c *Config) { c.RepeatInWindow = 6 }, want: silent},
		{name: "repeat_in_window 6: x6", give: interleave(6, "bash:cat status=>"+jobStatus), cfg: func(c *Config) { c.RepeatInWindow = 6 }, want: stopped},
		{name: "window 9: x5 over 10 steps", give: interleave(5, "bash:cat status=>"+jobStatus), cfg: func(c *Config) { c.Window = 9 }, want: silent},
		{name: "window 10: x5 over 10 steps", give: interleave(5, "bash:cat status=>"+jobStatus), cfg: func(c *Config) { c.Window = 10 }, want: stopped},
		{name: "model override repeat_consecutive 5: x4", give: rep(4, "bash:git status=>clean"),
			cfg: func(c *Config) { c.Models = map[string]Override{"test-*": {RepeatConsecutive: 5}} }, want: silent},
		{name: "model override repeat_consecutive 5: x5", give: rep(5, "bash:git status=>clean"),
			cfg: func(c *Config) { c.Models = map[string]Override{"test-*": {RepeatConsecutive: 5}} }, want: stopped},
		{name: "tool override repeat_consecutive 2: x2", give: rep(2, "bash:git status=>clean"),
			cfg: func(c *Config) { c.Tools = map[string]ToolOverride{"bash": {RepeatConsecutive: 2}} }, want: stopped},
	})
}

// TestWaitThresholds: calls that wait repeat by design, so both repetition
// rules count them against waitFactor times the usual threshold.
func TestWaitThresholds(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want bool // want a tool_repetition detection
	}{
		{"plain call x5 in window", interleave(5, "bash:cat status=>"+jobStatus), true},
		{"sleep poll x6 in window", interleave(6, "bash:sleep 10 && cat status=>"+jobStatus), false},
		{"wait tool x6 in window", interleave(6, "wait_for_job:{\"id\":7}=>"+jobStatus), false},
		{"sleep poll x15 in window", rep(5, "bash:sleep 10 && cat status=>"+jobStatus, "bash:sleep 10 && cat status=>"+jobStatus, "bash:sleep 10 && cat status=>"+jobStatus, "bash:date=>Tue"), true},
		{"sleep poll x8 back to back", rep(8, "bash:sleep 10 && cat status=>"+jobStatus), false},
		{"sleep poll x9 back to back", rep(9, "bash:sleep 10 && cat status=>"+jobStatus), true},
	}
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := e.Inspect(mustParse(t, build(tt.give...)))
			if got := hasCategory(v, string(ToolRepetition)); got != tt.want {
				t.Errorf("Inspect = %v; want tool_repetition %v", v.Detections, tt.want)
			}
		})
	}
}

func TestScoreGrowsWithCount(t *testing.T) {
	e, _ := NewEngine(DefaultConfig())
	prev := 0.0
	for n := 3; n <= 7; n++ {
		v := e.Inspect(mustParse(t, build(rep(n, "bash:git status=>clean")...)))
		if v.Confidence <= prev && v.Confidence < 1 {
			t.Errorf("x%d Confidence = %.3f; want > %.3f", n, v.Confidence, prev)
		}
		prev = v.Confidence
	}
}
