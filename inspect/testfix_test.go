package inspect

import (
	"fmt"
	"strings"
	"testing"
)

// sameEditRuns returns n rounds of the same edit (only its trailing
// blanks vary) followed by a test run failing with fail.
func sameEditRuns(n int, fail string) []string {
	var out []string
	for i := 0; i < n; i++ {
		sp := strings.Repeat(" ", i)
		out = append(out, `edit_file:{"path":"a.py","old_string":"x = 1`+sp+`","new_string":"x = load()`+sp+`"}=>ok`, "bash:pytest -q=>"+fail)
	}
	return out
}

func TestTestFixCycle(t *testing.T) {
	const keyErr = "FAILED t.py::test_x - KeyError: 'id'"
	numbers := func(n int) []string {
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, fmt.Sprintf(`edit_file:{"path":"a.py","old_string":"    client = Client(\n        retries=%d,\n        timeout=30,\n    )","new_string":"    client = Client(\n        retries=%d,\n        timeout=30,\n    )"}=>ok`, i, i+1),
				"bash:pytest -q=>"+keyErr)
		}
		return out
	}
	runFamily(t, TestFixCycle, []familyCase{
		// The loop it exists for: the same failing run after no real change.
		{name: "same error after the same edit", give: sameEditRuns(4, keyErr), want: stopped},
		{name: "same error after edits changing only a number", give: numbers(4), want: stopped},
		{name: "same failing run with only reads between", give: []string{
			"bash:npm test=>FAIL src/app.test.js\n  expected 200, got 500", "bash:cat src/app.js=>module.exports = app",
			"bash:npm test=>FAIL src/app.test.js\n  expected 200, got 500", "bash:grep -n handler src/app.js=>12: handler()",
			"bash:npm test=>FAIL src/app.test.js\n  expected 200, got 500", "bash:cat src/routes.js=>router.get('/')",
			"bash:npm test=>FAIL src/app.test.js\n  expected 200, got 500"}, want: stopped},

		// Healthy near-misses.
		{name: "a test fixed after a few runs", give: fixAndRun(keyErr, keyErr, "FAILED t.py::test_x - TypeError: x", ""), want: silent},
		{name: "same error after the same edit x4, then fixed by another", give: append(sameEditRuns(4, keyErr),
			`edit_file:{"path":"a.py","old_string":"import os","new_string":"import os, json"}=>ok`, "bash:pytest -q=>4 passed"), want: silent},
		{name: "a new failure after each different edit", give: fixAndRun(keyErr, "FAILED t.py::test_x - TypeError: x",
			"FAILED t.py::test_x - AttributeError: y", "FAILED t.py::test_x - ValueError: z"), want: healthy},
		{name: "failures going down, each run only an exit status", give: fixAndRun(rc(1, "3 failed, 7 passed"), rc(1, "2 failed, 8 passed"),
			rc(1, "1 failed, 9 passed"), rc(1, "1 failed, 9 passed")), want: healthy},

		// Thresholds: test_fix_count N fires at N failing runs, not at N-1.
		{name: "default test_fix_count 4: x3", give: sameEditRuns(3, keyErr), want: absent},
		{name: "test_fix_count 5: x4", give: sameEditRuns(4, keyErr), cfg: func(c *Config) { c.TestFixCount = 5 }, want: absent},
		{name: "test_fix_count 5: x5", give: sameEditRuns(5, keyErr), cfg: func(c *Config) { c.TestFixCount = 5 }, want: stopped},
		{name: "model override test_fix_count 5: x4", give: sameEditRuns(4, keyErr),
			cfg: func(c *Config) { c.Models = map[string]Override{"test-*": {TestFixCount: 5}} }, want: absent},
		{name: "model override test_fix_count 5: x5", give: sameEditRuns(5, keyErr),
			cfg: func(c *Config) { c.Models = map[string]Override{"test-*": {TestFixCount: 5}} }, want: stopped},
	})
}
