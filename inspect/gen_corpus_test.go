package inspect

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "regenerate testdata/corpus/*.jsonl from the generators")

// conv builds a chat request deterministically.
type conv struct {
	msgs []map[string]any
	n    int
}

func newConv(system, task string) *conv {
	c := &conv{}
	c.msgs = append(c.msgs, map[string]any{"role": "system", "content": system})
	c.user(task)
	return c
}

func (c *conv) user(text string) *conv {
	c.msgs = append(c.msgs, map[string]any{"role": "user", "content": text})
	return c
}

func (c *conv) say(text string) *conv {
	c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": text})
	return c
}

// call adds one assistant turn with a tool call and its result.
func (c *conv) call(text, tool string, args map[string]any, result string) *conv {
	return c.parallel(text, tc{tool, args, result})
}

type tc struct {
	tool   string
	args   map[string]any
	result string
}

func (c *conv) parallel(text string, calls ...tc) *conv {
	var tcs []any
	var results []map[string]any
	for _, x := range calls {
		c.n++
		id := fmt.Sprintf("call_%03d_%x", c.n, c.n*7919)
		a, _ := json.Marshal(x.args)
		tcs = append(tcs, map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": x.tool, "arguments": string(a)}})
		results = append(results, map[string]any{"role": "tool", "tool_call_id": id, "content": x.result})
	}
	m := map[string]any{"role": "assistant", "tool_calls": tcs}
	if text != "" {
		m["content"] = text
	} else {
		m["content"] = nil
	}
	c.msgs = append(c.msgs, m)
	c.msgs = append(c.msgs, results...)
	return c
}

func (c *conv) bash(cmd, out string) *conv {
	return c.call("", "bash", map[string]any{"command": cmd}, out)
}

func (c *conv) request(model string) map[string]any {
	return map[string]any{"model": model, "messages": c.msgs}
}

type genCase struct {
	id, expect, family string
	build              func() *conv
	model              string
}

func rc(code int, out string) string {
	return fmt.Sprintf("<returncode>%d</returncode>\n<output>\n%s\n</output>", code, out)
}

const sysPrompt = "You are a coding agent. Use the tools to solve the task."

func loopCases() []genCase {
	var cs []genCase
	add := func(id, fam string, b func() *conv) {
		cs = append(cs, genCase{id: id, expect: "loop", family: fam, build: b})
	}
	lsOut := "total 12\ndrwxr-xr-x 2 user user 4096 Jan  1 12:00 .\n-rw-r--r-- 1 user user  120 Jan  1 12:00 main.py\n-rw-r--r-- 1 user user   80 Jan  1 12:00 README.md"
	add("openhands-ls-x4", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Fix the failing import in main.py")
		for i := 0; i < 4; i++ {
			c.call("Let me look at the directory.", "execute_bash", map[string]any{"command": "ls -l"}, lsOut)
		}
		return c
	})
	add("gemini-read-failing-file-x5", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Summarise config.yaml")
		c.call("", "read_file", map[string]any{"absolute_path": "/repo/config.yaml"}, "Error: File not found: /repo/config.yaml")
		for i := 0; i < 4; i++ {
			c.call(fmt.Sprintf("Attempt %d to read the config.", i+2), "read_file", map[string]any{"absolute_path": "/repo/config.yaml"}, "Error: File not found: /repo/config.yaml")
		}
		return c
	})
	add("openhands-same-action-varying-errors-x3", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Run the app")
		for _, out := range []string{
			"bash: python: command not found",
			"Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\nImportError: No module named flask",
			"Error: address already in use\nexit code 1",
		} {
			c.call("", "execute_bash", map[string]any{"command": "python app.py"}, out)
		}
		return c
	})
	add("git-status-x3-timestamps", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Commit the changes")
		for i := 0; i < 3; i++ {
			c.bash("git status", fmt.Sprintf("[2024-05-0%dT10:1%d:00Z] On branch main\nnothing to commit, working tree clean (took 0.%d3s)", i+1, i, i+2))
		}
		return c
	})
	add("key-order-differs-x3", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Find the handler")
		c.call("", "grep", map[string]any{"pattern": "handleRequest", "path": "src"}, "src/server.go:42: func handleRequest(w http.ResponseWriter)")
		c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "x1", "type": "function", "function": map[string]any{"name": "grep", "arguments": `{ "path": "src",  "pattern": "handleRequest" }`}}}},
			map[string]any{"role": "tool", "tool_call_id": "x1", "content": "src/server.go:42: func handleRequest(w http.ResponseWriter)"})
		c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "x2", "type": "function", "function": map[string]any{"name": "grep", "arguments": `{"pattern":"handleRequest","path":"src","task_progress":"- [x] look"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "x2", "content": "src/server.go:42: func handleRequest(w http.ResponseWriter)"})
		return c
	})
	add("window-5-of-20-same-read", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Understand parser.py")
		body := "def parse(s):\n    return s.split(',')\n"
		for i := 0; i < 5; i++ {
			c.call("", "read_file", map[string]any{"path": "parser.py"}, body)
			c.bash(fmt.Sprintf("python -c 'print(%d)'", i), fmt.Sprint(i))
		}
		return c
	})
	add("parallel-identical-mvn", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Run the build")
		var calls []tc
		for i := 0; i < 4; i++ {
			calls = append(calls, tc{"shell", map[string]any{"command": "mvn test"}, "[ERROR] BUILD FAILURE\n[ERROR] Failed to execute goal: compilation failure"})
		}
		return c.parallel("", calls...)
	})
	add("ping-pong-ab-x3", "tool_cycle", func() *conv {
		c := newConv(sysPrompt, "Why does the test fail?")
		for i := 0; i < 3; i++ {
			c.call("", "read_file", map[string]any{"path": "app/models.py"}, "class User:\n    name = CharField()\n")
			c.call("", "read_file", map[string]any{"path": "tests/test_models.py"}, "def test_user():\n    assert User().name\n")
		}
		return c
	})
	add("three-cycle-x3", "tool_cycle", func() *conv {
		c := newConv(sysPrompt, "Deploy the service")
		for i := 0; i < 3; i++ {
			c.bash("kubectl get pods", "NAME READY STATUS\napi-7d9f 0/1 CrashLoopBackOff")
			c.bash("kubectl logs api-7d9f", "panic: missing DATABASE_URL")
			c.bash("kubectl describe deploy api", "Replicas: 1 desired | 0 available")
		}
		return c
	})
	add("ping-pong-view-search", "tool_cycle", func() *conv {
		c := newConv(sysPrompt, "Locate where timeout is set")
		for i := 0; i < 4; i++ {
			c.call("", "search_files", map[string]any{"regex": "timeout", "path": "."}, "config/default.json: \"timeout\": 30")
			c.call("", "view", map[string]any{"path": "config/default.json"}, "{\n  \"timeout\": 30\n}")
		}
		return c
	})
	add("edit-old-str-not-found-drift", "param_drift", func() *conv {
		c := newConv(sysPrompt, "Rename foo to bar in util.py")
		olds := []string{"def foo(x):", "def foo(x) :", "def  foo(x):", "def foo( x ):", "def foo(x):\n"}
		for _, o := range olds {
			c.call("", "str_replace_based_edit_tool", map[string]any{"command": "str_replace", "path": "/repo/util.py", "old_str": o, "new_str": "def bar(x):"},
				"No replacement was performed, old_str `"+o+"` did not appear verbatim in /repo/util.py.")
		}
		return c
	})
	add("read-offset-drift-same-error", "param_drift", func() *conv {
		c := newConv(sysPrompt, "Read the log")
		for i := 0; i < 5; i++ {
			c.call("", "read_file", map[string]any{"path": "logs/app.log", "offset": 1000 + i, "limit": 100}, "Error: offset 100"+fmt.Sprint(i)+" is beyond end of file (412 lines)")
		}
		return c
	})
	add("cat-head-tail-same-file", "param_drift", func() *conv {
		c := newConv(sysPrompt, "Check settings")
		out := rc(1, "cat: settings.ini: No such file or directory")
		c.bash("cat settings.ini", out)
		c.bash("head -n 50 settings.ini", rc(1, "head: cannot open 'settings.ini' for reading: No such file or directory"))
		c.bash("tail settings.ini", rc(1, "tail: cannot open 'settings.ini' for reading: No such file or directory"))
		c.bash("less settings.ini", rc(1, "settings.ini: No such file or directory"))
		return c
	})
	add("search-foo-fo0-f00", "same_result", func() *conv {
		c := newConv(sysPrompt, "Find the retry helper")
		for _, q := range []string{"retryWithBackoff", "retry_with_backoff", "retryWithBackOff", "retryBackoff"} {
			c.call("", "search_code", map[string]any{"query": q}, "No results found.")
		}
		return c
	})
	add("grep-variants-empty", "same_result", func() *conv {
		c := newConv(sysPrompt, "Where is MAX_CONN defined?")
		for _, q := range []string{"grep -rn MAX_CONN src/", "grep -rn 'MAX_CONN =' src/", "grep -rn MAX_CONNS src/", "grep -rni max_conn src/"} {
			c.bash(q, rc(1, ""))
		}
		return c
	})
	add("webfetch-404-variants", "same_result", func() *conv {
		c := newConv(sysPrompt, "Fetch the API docs")
		for _, u := range []string{"https://example.com/docs/api", "https://example.com/docs/api/", "https://example.com/api/docs", "https://example.com/docs/v1/api"} {
			c.call("", "web_fetch", map[string]any{"url": u}, "Error: HTTP 404 Not Found")
		}
		return c
	})
	add("same-import-error-different-commands", "error_cycle", func() *conv {
		c := newConv(sysPrompt, "Run the app")
		tb := "Traceback (most recent call last):\n  File \"/repo/%s\", line %d, in <module>\n    import yaml\nModuleNotFoundError: No module named 'yaml'"
		c.bash("python app.py", rc(1, fmt.Sprintf(tb, "app.py", 3)))
		c.bash("python -m app", rc(1, fmt.Sprintf(tb, "app/__main__.py", 1)))
		c.bash("python3 app.py --debug", rc(1, fmt.Sprintf(tb, "app.py", 3)))
		return c
	})
	add("edit-then-same-error-x3", "error_cycle", func() *conv {
		c := newConv(sysPrompt, "Fix the type error")
		for i := 0; i < 3; i++ {
			c.call("", "edit_file", map[string]any{"path": "calc.py", "old_string": fmt.Sprintf("total = a + b%s", strings.Repeat(" ", i)), "new_string": fmt.Sprintf("total = int(a) + b  # try %d", i)}, "File edited.")
			c.bash("python calc.py", rc(1, fmt.Sprintf("Traceback (most recent call last):\n  File \"calc.py\", line %d, in <module>\n    total = int(a) + b\nTypeError: unsupported operand type(s) for +: 'int' and 'str'", 10+i)))
		}
		return c
	})
	add("pytest-whack-a-mole", "whack_a_mole", func() *conv {
		c := newConv(sysPrompt, "Make the tests pass")
		errA := "FAILED tests/test_api.py::test_get - KeyError: 'id'"
		errB := "FAILED tests/test_api.py::test_get - TypeError: 'NoneType' object is not subscriptable"
		for i := 0; i < 2; i++ {
			c.call("", "edit_file", map[string]any{"path": "api.py", "old_string": "return row['id']", "new_string": "return row.get('id')", "n": i}, "ok")
			c.bash("pytest -q tests/test_api.py", rc(1, "F\n=== FAILURES ===\n"+errB+"\n1 failed in 0.12s"))
			c.call("", "edit_file", map[string]any{"path": "api.py", "old_string": "return row.get('id')", "new_string": "return row['id']", "n": i}, "ok")
			c.bash("pytest -q tests/test_api.py", rc(1, "F\n=== FAILURES ===\n"+errA+"\n1 failed in 0.09s"))
		}
		return c
	})
	add("build-errors-alternate", "whack_a_mole", func() *conv {
		c := newConv(sysPrompt, "Fix the Go build")
		eA := "./main.go:12:2: undefined: config.Load"
		eB := "./main.go:5:2: \"github.com/x/config\" imported and not used"
		for i := 0; i < 3; i++ {
			c.call("", "write_file", map[string]any{"path": "main.go", "content": fmt.Sprintf("package main // v%d-a", i)}, "written")
			c.bash("go build ./...", rc(1, "# example\n"+eA))
			c.call("", "write_file", map[string]any{"path": "main.go", "content": fmt.Sprintf("package main // v%d-b", i)}, "written")
			c.bash("go build ./...", rc(1, "# example\n"+eB))
		}
		return c
	})
	add("test-fix-same-failure-x4", "test_fix_cycle", func() *conv {
		c := newConv(sysPrompt, "Fix test_parse_date")
		for i := 0; i < 4; i++ {
			c.call("", "edit_file", map[string]any{"path": "dates.py", "old_string": fmt.Sprintf("fmt = '%%Y-%%m-%%d' # %d", i), "new_string": fmt.Sprintf("fmt = '%%Y-%%m-%%d' # %d", i+1)}, "The file dates.py has been updated.")
			c.bash("python -m pytest tests/test_dates.py -q", rc(1, fmt.Sprintf("F\n_____ test_parse_date _____\n    assert parse_date('2024-01-31') == date(2024, 1, 31)\nE   AssertionError: assert None == datetime.date(2024, 1, 31)\nFAILED tests/test_dates.py::test_parse_date\n1 failed in 0.%02ds", 10+i*7)))
		}
		return c
	})
	add("npm-test-same-failure", "test_fix_cycle", func() *conv {
		c := newConv(sysPrompt, "Fix the sum test")
		for i := 0; i < 5; i++ {
			c.call("", "write_to_file", map[string]any{"path": "src/sum.js", "content": fmt.Sprintf("module.exports = (a, b) => a + b + %d;", i)}, "File saved.")
			c.call("", "execute_command", map[string]any{"command": "npm test"}, fmt.Sprintf("FAIL src/sum.test.js\n  ● sum › adds numbers\n    expect(received).toBe(expected)\n    Expected: 3\n    Received: %d\nTests: 1 failed, 1 total\nTime: %d.%ds\nnpm ERR! Test failed.  See above for more details.", 3+i+1, 1, i))
		}
		return c
	})
	add("edit-undo-redo", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "Speed up the loop")
		a, b := "for i in range(len(xs)):\n    total += xs[i]", "total = sum(xs)"
		for i := 0; i < 2; i++ {
			c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/w/calc.py", "old_str": a, "new_str": b}, "The file /w/calc.py has been edited.")
			c.bash("python bench.py", rc(0, fmt.Sprintf("elapsed %d.1s", 2+i)))
			c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/w/calc.py", "old_str": b, "new_str": a}, "The file /w/calc.py has been edited.")
		}
		return c
	})
	add("edit-revert-then-redo", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "Fix the off-by-one")
		a, b := "return n", "return n + 1"
		for i, e := range [][2]string{{a, b}, {b, a}, {a, b}} {
			c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/w/count.py", "old_str": e[0], "new_str": e[1]}, "The file /w/count.py has been edited.")
			c.bash("pytest tests/test_count.py", rc(1, fmt.Sprintf("FAILED tests/test_count.py::test_count - assert %d == 3", 2+i%2)))
		}
		return c
	})
	add("write-content-oscillates", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "Fix the config")
		A := "port: 8080\nhost: 0.0.0.0\n"
		B := "port: 9090\nhost: 0.0.0.0\n"
		for _, content := range []string{A, B, A, B, A} {
			c.call("", "write_file", map[string]any{"file_path": "config.yaml", "content": content}, "Successfully wrote to config.yaml")
			c.bash("./check-config.sh", rc(0, "config ok"))
		}
		return c
	})
	add("monologue-x3", "output_repetition", func() *conv {
		c := newConv(sysPrompt, "Implement the cache")
		c.bash("ls", "cache.py\ntests")
		t := "I will now implement the LRU cache in cache.py using an OrderedDict, then add tests for eviction and expiry."
		c.say(t).user("please continue").say(t).user("Continue").say(t + " ")
		return c
	})
	add("text-near-duplicate-x3", "output_repetition", func() *conv {
		c := newConv(sysPrompt, "Write the migration")
		c.bash("ls migrations", "0001_initial.py")
		c.say("The migration needs to add the email column to the users table and backfill it from the profiles table before adding the NOT NULL constraint.")
		c.user("please continue")
		c.say("The migration needs to add the email column to the users table and backfill it from the profiles table before adding the NOT NULL constraint!")
		c.user("continue")
		c.say("So: the migration needs to add the email column to the users table and backfill it from the profiles table before adding the NOT NULL constraint.")
		return c
	})
	add("summary-loop-x4", "summary_loop", func() *conv {
		c := newConv(sysPrompt, "Refactor the module")
		c.bash("ls src", "a.py b.py")
		c.say("Summary so far: I listed the source files. Next I will refactor a.py.").user("please continue")
		c.say("To recap: the files are a.py and b.py. I will refactor a.py next.").user("please continue")
		c.say("Current status: I have looked at the files. The next step is refactoring a.py.").user("please continue")
		c.say("Progress summary: listed files; next, refactor a.py as planned.")
		return c
	})
	add("summary-loop-empty-replies", "summary_loop", func() *conv {
		c := newConv(sysPrompt, "Add logging")
		c.bash("grep -rn print src", "src/a.py:3: print('x')")
		for i := 0; i < 4; i++ {
			c.say("I'll add logging now.").user("Please continue working on the task.")
		}
		return c
	})
	add("please-continue-does-not-reset", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Check the service status")
		for i := 0; i < 2; i++ {
			c.bash("systemctl status api", "● api.service - API\n   Active: failed (Result: exit-code) since Mon 2024-05-06 10:00:00 UTC")
		}
		c.user("please continue")
		c.bash("systemctl status api", "● api.service - API\n   Active: failed (Result: exit-code) since Mon 2024-05-06 10:00:00 UTC")
		return c
	})
	add("loopguard-notice-does-not-reset", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Check the DNS")
		c.bash("dig example.internal", ";; connection timed out; no servers could be reached")
		c.bash("dig example.internal", ";; connection timed out; no servers could be reached")
		c.user("[loopguard] Loop warning: tool_repetition: bash(dig example.internal) x2. Try a different approach.")
		c.bash("dig example.internal", ";; connection timed out; no servers could be reached")
		return c
	})
	add("condensation-notice-does-not-reset", "error_cycle", func() *conv {
		c := newConv(sysPrompt, "Migrate the database")
		e := rc(1, "psql: error: connection to server at \"db\" (10.0.0.5), port 5432 failed: FATAL:  password authentication failed for user \"app\"")
		c.bash("psql -h db -U app -c 'select 1'", e)
		c.bash("PGPASSWORD=secret psql -h db -U app -c 'select 1'", e)
		c.user("Here is a summary of the conversation so far: the agent is trying to connect to the database.")
		c.bash("psql -h db -U app -d app -c 'select 1'", e)
		return c
	})
	add("mini-swe-text-mode-repeat", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "<pr_description>Fix the bug in parser</pr_description>")
		for i := 0; i < 4; i++ {
			c.say("THOUGHT: Let me check the test file again.\n\n```bash\ncat tests/test_parser.py\n```")
			c.user("<returncode>1</returncode>\n<output>\ncat: tests/test_parser.py: No such file or directory\n</output>")
		}
		return c
	})
	add("legacy-function-call-repeat", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "What's the weather?")
		for i := 0; i < 3; i++ {
			c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": nil, "function_call": map[string]any{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
				map[string]any{"role": "function", "name": "get_weather", "content": "Service unavailable"})
		}
		return c
	})
	add("content-parts-repeat", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "List the buckets")
		for i := 0; i < 3; i++ {
			id := fmt.Sprintf("p%d", i)
			c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "Listing buckets."}}, "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "s3_list", "arguments": "{}"}}}},
				map[string]any{"role": "tool", "tool_call_id": id, "content": []any{map[string]any{"type": "text", "text": "AccessDenied: not authorized to perform s3:ListAllMyBuckets"}}})
		}
		return c
	})
	add("poll-no-change-x5", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Wait for the job to finish")
		for i := 0; i < 5; i++ {
			c.call("", "job_status", map[string]any{"job_id": "j-42"}, fmt.Sprintf(`{"state":"RUNNING","checked_at":"2024-05-06T10:%02d:00Z","pid":%d}`, i, 4000+i))
		}
		return c
	})
	add("cline-attempt-completion-repeat", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Update the README")
		for i := 0; i < 3; i++ {
			c.call("", "attempt_completion", map[string]any{"result": "I updated the README with install instructions.", "task_progress": fmt.Sprintf("- [x] step %d", i)}, "[attempt_completion] Result: The user denied this operation.")
		}
		return c
	})
	return cs
}

func healthyCases() []genCase {
	var cs []genCase
	add := func(id, fam string, b func() *conv) {
		cs = append(cs, genCase{id: id, expect: "no_loop", family: fam, build: b})
	}
	add("tests-fail-less-after-each-edit-exit-status-only", "healthy_test_after_edit", func() *conv {
		c := newConv(sysPrompt, "Make the test suite pass")
		for i, out := range []string{"3 failing", "2 failing", "1 failing"} {
			c.bash("npm test", out+"\nexit code 1")
			c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": fmt.Sprintf("src/m%d.js", i), "old_str": "a", "new_str": "b"}, "The file has been edited.")
		}
		c.bash("npm test", "all passing")
		return c
	})
	add("wait-for-server-with-sleep", "healthy_polling", func() *conv {
		c := newConv(sysPrompt, "Start the server and check it responds")
		c.bash("nohup ./server &", "")
		for i := 0; i < 3; i++ {
			c.bash("curl -s localhost:8080/health", "curl: (7) Failed to connect to localhost port 8080: Connection refused")
			c.bash("sleep 5", "")
		}
		return c
	})
	add("tests-after-each-different-edit", "healthy_test_after_edit", func() *conv {
		c := newConv(sysPrompt, "Fix the three failing tests")
		fails := []string{"3 failed, 7 passed", "2 failed, 8 passed", "1 failed, 9 passed", "10 passed"}
		names := []string{"test_parse_header", "test_render_footer", "test_cache_expiry", ""}
		for i, f := range fails {
			if i > 0 {
				c.call("", "edit_file", map[string]any{"path": fmt.Sprintf("mod%d.py", i), "old_string": "x", "new_string": fmt.Sprintf("y%d", i)}, "ok")
			}
			code := 1
			if i == len(fails)-1 {
				code = 0
			}
			c.bash("pytest -q", rc(code, fmt.Sprintf("FAILED tests/test_mod.py::%s - AssertionError\n%s in 0.%ds", names[i], f, i+1)))
		}
		return c
	})
	add("reading-many-files", "healthy_reads", func() *conv {
		c := newConv(sysPrompt, "Review the package")
		for i := 0; i < 25; i++ {
			c.call("", "read_file", map[string]any{"path": fmt.Sprintf("pkg/file%02d.go", i)}, fmt.Sprintf("package pkg\n\nfunc F%d() int { return %d }\n", i, i))
		}
		return c
	})
	add("paginating-a-file", "healthy_pagination", func() *conv {
		c := newConv(sysPrompt, "Read the whole log")
		for i := 0; i < 12; i++ {
			c.call("", "read_file", map[string]any{"path": "big.log", "offset": i * 200, "limit": 200}, fmt.Sprintf("line %d: request served\nline %d: request served", i*200+1, i*200+2))
		}
		return c
	})
	add("view-range-pagination", "healthy_pagination", func() *conv {
		c := newConv(sysPrompt, "Understand models.py")
		for i := 0; i < 8; i++ {
			c.call("", "str_replace_editor", map[string]any{"command": "view", "path": "/repo/models.py", "view_range": []int{i*50 + 1, i*50 + 50}}, fmt.Sprintf("%d\tclass Model%d:\n%d\t    pass", i*50+1, i, i*50+2))
		}
		return c
	})
	add("polling-until-change", "healthy_polling", func() *conv {
		c := newConv(sysPrompt, "Wait for the deploy")
		states := []string{"PENDING 10%", "RUNNING 30%", "RUNNING 55%", "RUNNING 80%", "RUNNING 95%", "SUCCEEDED 100%"}
		for _, s := range states {
			c.call("", "deploy_status", map[string]any{"id": "d-1"}, s)
		}
		return c
	})
	add("mcp-read-output-paging-x20", "healthy_polling", func() *conv {
		c := newConv(sysPrompt, "Stream the build output")
		for i := 0; i < 20; i++ {
			c.call("", "read_output", map[string]any{"process": "build"}, fmt.Sprintf("[%d/200] Compiling crate_%d v0.%d.0", i*10, i, i))
		}
		return c
	})
	add("sleep-and-check-progress", "healthy_polling", func() *conv {
		c := newConv(sysPrompt, "Wait for the training job")
		for i := 0; i < 6; i++ {
			c.bash("sleep 60 && tail -n 1 train.log", fmt.Sprintf("epoch %d/10 loss=%.3f", i+1, 1.0/float64(i+1)))
		}
		return c
	})
	add("batch-edit-all-files", "healthy_batch", func() *conv {
		c := newConv(sysPrompt, "Update the license header in every file")
		for i := 0; i < 15; i++ {
			c.call("", "edit_file", map[string]any{"path": fmt.Sprintf("src/f%02d.py", i), "old_string": "# Copyright 2023", "new_string": "# Copyright 2024"}, "Successfully edited file")
		}
		return c
	})
	add("write-many-files-same-ack", "healthy_batch", func() *conv {
		c := newConv(sysPrompt, "Scaffold the handlers")
		for i := 0; i < 8; i++ {
			c.call("", "write_file", map[string]any{"path": fmt.Sprintf("handlers/h%d.go", i), "content": fmt.Sprintf("package handlers\n// H%d\n", i)}, "write complete")
		}
		return c
	})
	add("git-diff-patch-between-edits", "healthy_patch", func() *conv {
		c := newConv(sysPrompt, "Prepare the patch")
		for i := 0; i < 6; i++ {
			c.call("", "edit_file", map[string]any{"path": "lib.py", "old_string": fmt.Sprintf("v%d", i), "new_string": fmt.Sprintf("v%d", i+1)}, "ok")
			c.bash("git diff > patch.txt", rc(0, ""))
		}
		return c
	})
	add("repro-after-each-edit-changing-errors", "healthy_test_after_edit", func() *conv {
		c := newConv(sysPrompt, "Fix the crash")
		errs := []string{"ModuleNotFoundError: No module named 'numpy'", "ModuleNotFoundError: No module named 'pandas'", "ImportError: cannot import name 'tz' from 'dateutil'", "ValueError: tz-aware index not supported"}
		for i, e := range errs {
			c.bash(fmt.Sprintf("pip install dep%d -q", i), rc(0, ""))
			c.bash("python reproduce.py", rc(1, "Traceback (most recent call last):\n  File \"reproduce.py\", line 1, in <module>\n"+e))
		}
		c.bash("sed -i 's/np.diff/pd.Series.diff/' lib/temp.py", rc(0, ""))
		c.bash("python reproduce.py", rc(0, "OK: 19.85"))
		return c
	})
	add("table-rows-and-code-in-answer", "healthy_text", func() *conv {
		c := newConv(sysPrompt, "Show the results as a table")
		c.bash("cat results.csv", "a,1\nb,1\nc,1")
		var b strings.Builder
		b.WriteString("| name | value |\n|---|---|\n")
		for i := 0; i < 30; i++ {
			b.WriteString("| item | 1 |\n")
		}
		b.WriteString("\n```python\nfor r in rows:\n    print(r)\nfor r in rows:\n    print(r)\n```\n")
		c.say(b.String())
		return c
	})
	add("short-answers-repeat-done", "healthy_text", func() *conv {
		c := newConv(sysPrompt, "Rename the variables one by one and say Done after each.")
		for i := 0; i < 4; i++ {
			c.call("", "edit_file", map[string]any{"path": "x.py", "old_string": fmt.Sprintf("a%d", i), "new_string": fmt.Sprintf("b%d", i)}, "ok")
			c.say("Done.").user(fmt.Sprintf("Now rename a%d.", i+1))
		}
		return c
	})
	add("new-human-message-resets", "healthy_reset", func() *conv {
		c := newConv(sysPrompt, "Check the status")
		for i := 0; i < 4; i++ {
			c.bash("git status", "nothing to commit, working tree clean")
		}
		c.user("Thanks. Now please add a CHANGELOG entry for version 1.2.")
		c.call("", "read_file", map[string]any{"path": "CHANGELOG.md"}, "# Changelog\n## 1.1\n- fixes")
		c.call("", "edit_file", map[string]any{"path": "CHANGELOG.md", "old_string": "# Changelog", "new_string": "# Changelog\n## 1.2\n- new"}, "ok")
		return c
	})
	add("three-identical-ls-openhands-not-stuck", "healthy_threshold", func() *conv {
		c := newConv(sysPrompt, "List files")
		c.bash("ls", "a b")
		c.bash("ls", "a b")
		c.bash("pwd", "/w")
		c.bash("ls", "a b")
		return c
	})
	add("openhands-not-stuck-sequence", "healthy_threshold", func() *conv {
		c := newConv(sysPrompt, "Inspect the repo")
		c.bash("ls", "a.py b.py")
		c.call("", "view", map[string]any{"path": "a.py"}, "print(1)")
		c.bash("pwd", "/w")
		c.call("", "view", map[string]any{"path": "b.py"}, "print(2)")
		c.bash("pwd", "/w")
		c.call("", "view", map[string]any{"path": "b.py"}, "print(2)")
		return c
	})
	add("two-identical-then-move-on", "healthy_threshold", func() *conv {
		c := newConv(sysPrompt, "Run the linter")
		c.bash("ruff check .", "Found 2 errors.")
		c.bash("ruff check .", "Found 2 errors.")
		c.bash("ruff check . --fix", "Found 2 errors (2 fixed, 0 remaining).")
		c.bash("ruff check .", "All checks passed!")
		return c
	})
	add("debug-print-added-then-removed", "healthy_edit", func() *conv {
		c := newConv(sysPrompt, "Debug the parser")
		c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "p.py", "old_str": "return x", "new_str": "print(x)\n    return x"}, "edited")
		c.bash("python p.py", rc(0, "[1, 2]"))
		c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "p.py", "old_str": "print(x)\n    return x", "new_str": "return x"}, "edited")
		c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "p.py", "old_str": "x = s.split()", "new_str": "x = s.split(',')"}, "edited")
		c.bash("python p.py", rc(0, "[1, 2, 3]"))
		return c
	})
	add("different-searches-find-things", "healthy_search", func() *conv {
		c := newConv(sysPrompt, "Find usages")
		for i, q := range []string{"parseConfig", "loadConfig", "Config{", "NewServer", "ListenAndServe"} {
			c.call("", "grep", map[string]any{"pattern": q, "path": "."}, fmt.Sprintf("cmd/main.go:%d: %s(...)", 10+i, q))
		}
		return c
	})
	add("exploring-two-misses-then-hit", "healthy_search", func() *conv {
		c := newConv(sysPrompt, "Find the retry helper")
		c.call("", "search_code", map[string]any{"query": "retryWithBackoff"}, "No results found.")
		c.call("", "search_code", map[string]any{"query": "backoff"}, "No results found.")
		c.call("", "search_code", map[string]any{"query": "retry"}, "net/retry.go:12: func Retry(fn func() error) error")
		c.call("", "read_file", map[string]any{"path": "net/retry.go"}, "package net\nfunc Retry(fn func() error) error { return fn() }")
		return c
	})
	add("step-by-step-narration-repeats", "healthy_text", func() *conv {
		c := newConv(sysPrompt, "Fix the bug")
		for i := 0; i < 6; i++ {
			c.call("Now let me run the reproduction script again to see whether the fix works:", "bash", map[string]any{"command": fmt.Sprintf("sed -i 's/a%d/b%d/' x.py && python repro.py", i, i)}, rc(0, fmt.Sprintf("result %d", i)))
		}
		return c
	})
	add("ignored-todo-write-repeats", "healthy_ignore", func() *conv {
		c := newConv(sysPrompt, "Plan and do the work")
		for i := 0; i < 6; i++ {
			c.call("", "todo_write", map[string]any{"todos": []string{"a", "b"}}, "Todos updated")
			c.call("", "edit_file", map[string]any{"path": fmt.Sprintf("f%d.py", i), "old_string": "a", "new_string": "b"}, "ok")
		}
		return c
	})
	add("task-progress-only-changes-no-repeat", "healthy_metadata", func() *conv {
		c := newConv(sysPrompt, "Write the docs")
		for i := 0; i < 5; i++ {
			c.call("", "write_to_file", map[string]any{"path": fmt.Sprintf("docs/p%d.md", i), "content": fmt.Sprintf("# Page %d", i), "task_progress": "- [ ] docs"}, "File saved.")
		}
		return c
	})
	add("cycle-edit-test-progress", "healthy_test_after_edit", func() *conv {
		c := newConv(sysPrompt, "Implement the feature step by step")
		for i := 0; i < 5; i++ {
			c.call("", "view", map[string]any{"path": "feature.py"}, fmt.Sprintf("def feature():\n    steps = %d\n", i))
			c.call("", "edit_file", map[string]any{"path": "feature.py", "old_string": fmt.Sprintf("steps = %d", i), "new_string": fmt.Sprintf("steps = %d", i+1)}, "ok")
			c.bash("pytest -q tests/test_feature.py", rc(0, fmt.Sprintf("%d passed in 0.2s", i+1)))
		}
		return c
	})
	add("same-ack-different-commands", "healthy_ack", func() *conv {
		c := newConv(sysPrompt, "Set up the environment")
		for _, cmd := range []string{"mkdir -p build", "touch build/.keep", "cp .env.example .env", "chmod +x run.sh", "git add -A", "git commit -qm init"} {
			c.bash(cmd, rc(0, ""))
		}
		return c
	})
	add("final-answer-after-work", "healthy_text", func() *conv {
		c := newConv(sysPrompt, "Explain the bug and fix it")
		c.bash("cat bug.py", "x = 1/0")
		c.call("", "edit_file", map[string]any{"path": "bug.py", "old_string": "1/0", "new_string": "1/1"}, "ok")
		c.say("I fixed the division by zero in bug.py by changing the divisor to one; the script now runs without raising ZeroDivisionError.")
		return c
	})
	add("two-summaries-then-work", "healthy_text", func() *conv {
		c := newConv(sysPrompt, "Refactor")
		c.bash("ls", "a.py")
		c.say("Plan: split a.py into two modules, one for parsing and one for rendering, and keep the public API stable.").user("please continue")
		c.say("Starting with the parsing module first, moving parse() and its helpers out of a.py.").user("please continue")
		c.call("", "write_file", map[string]any{"path": "parse.py", "content": "def parse(): pass"}, "ok")
		return c
	})
	add("whack-errors-but-resolved", "healthy_test_after_edit", func() *conv {
		c := newConv(sysPrompt, "Fix the build")
		c.bash("go build ./...", rc(1, "./a.go:3: undefined: X"))
		c.call("", "edit_file", map[string]any{"path": "a.go", "old_string": "X", "new_string": "Y"}, "ok")
		c.bash("go build ./...", rc(1, "./a.go:4: undefined: Z"))
		c.call("", "edit_file", map[string]any{"path": "a.go", "old_string": "Z", "new_string": "W"}, "ok")
		c.bash("go build ./...", rc(0, ""))
		c.bash("go test ./...", rc(0, "ok  example 0.01s"))
		return c
	})
	add("kubectl-rollout-watch", "healthy_polling", func() *conv {
		c := newConv(sysPrompt, "Roll out the new version")
		for i := 0; i < 5; i++ {
			c.bash("kubectl rollout status deploy/api --timeout=10s", fmt.Sprintf("Waiting for deployment \"api\" rollout to finish: %d of 5 updated replicas are available...", i+1))
		}
		return c
	})
	add("interleaved-reads-of-different-files-and-tests", "healthy_reads", func() *conv {
		c := newConv(sysPrompt, "Add type hints to every module")
		for i := 0; i < 8; i++ {
			f := fmt.Sprintf("pkg/m%d.py", i)
			c.call("", "read_file", map[string]any{"path": f}, fmt.Sprintf("def f%d(x): return x", i))
			c.call("", "edit_file", map[string]any{"path": f, "old_string": fmt.Sprintf("def f%d(x)", i), "new_string": fmt.Sprintf("def f%d(x: int) -> int", i)}, "ok")
			c.bash("mypy pkg", rc(0, fmt.Sprintf("Success: no issues found in %d source files", i+1)))
		}
		return c
	})
	return cs
}

// longHealthySession builds a 120-turn coding session: many files read,
// edited and tested, the test command re-run after each different edit.
func longHealthySession() genCase {
	return genCase{id: "long-healthy-session-120", expect: "no_loop", family: "healthy_long", build: func() *conv {
		c := newConv(sysPrompt, "Port the service from Flask to FastAPI")
		c.bash("find . -name '*.py' | head -50", "./app/__init__.py\n./app/routes.py")
		for i := 0; i < 40; i++ {
			f := fmt.Sprintf("app/module_%02d.py", i)
			c.call(fmt.Sprintf("Porting module %d.", i), "read_file", map[string]any{"path": f}, fmt.Sprintf("from flask import Blueprint\nbp = Blueprint('m%d', __name__)\n", i))
			c.call("", "edit_file", map[string]any{"path": f, "old_string": fmt.Sprintf("bp = Blueprint('m%d', __name__)", i), "new_string": fmt.Sprintf("router = APIRouter(prefix='/m%d')", i)}, "The file has been edited.")
			res := rc(0, fmt.Sprintf("%d passed, %d skipped in %d.%02ds", 10+i, 40-i, 1+i%3, i))
			if i%7 == 3 {
				res = rc(1, fmt.Sprintf("FAILED tests/test_m%02d.py::test_route - AssertionError: 404 != 200\n1 failed, %d passed", i, 10+i))
			}
			c.bash("pytest -q", res)
		}
		return c
	}}
}

// TestGenerateCorpus writes the hand-built corpus; run with -update.
func TestGenerateCorpus(t *testing.T) {
	if !*update {
		t.Skip("run with -update to regenerate testdata/corpus")
	}
	write := func(name string, cases []genCase) {
		var b strings.Builder
		for _, gc := range cases {
			model := gc.model
			if model == "" {
				model = "gpt-4o"
			}
			rec := map[string]any{"id": gc.id, "expect": gc.expect, "family": gc.family, "request": gc.build().request(model)}
			line, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(line)
			b.WriteByte('\n')
		}
		if err := os.WriteFile(filepath.Join("testdata/corpus", name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("loops.jsonl", loopCases())
	write("healthy.jsonl", healthyCases())
	write("long.jsonl", []genCase{longHealthySession()})
	write("oscillation.jsonl", oscillationCases())
	write("cycles.jsonl", cycleCases())
	write("volatile.jsonl", volatileCases())
	write("assistant_errors.jsonl", assistantErrorCases())
	write("progress.jsonl", progressCases())
	write("runaway.jsonl", runawayCases())
}
