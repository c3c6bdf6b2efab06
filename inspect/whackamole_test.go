package inspect

import (
	"fmt"
	"testing"
)

// fixAndRun returns, for each failure, a different edit followed by the
// test run that answers with that failure ("" for a passing run).
func fixAndRun(failures ...string) []string {
	var out []string
	for i, f := range failures {
		if f == "" {
			f = "5 passed"
		}
		out = append(out, fmt.Sprintf(`edit_file:{"path":"app.py","old_string":"v%d = None","new_string":"v%d = load(%d)"}=>ok`, i, i, i),
			"bash:pytest -q tests/=>"+f)
	}
	return out
}

func TestWhackAMole(t *testing.T) {
	const (
		keyErr  = "FAILED tests/t.py::test_load - KeyError: 'id'"
		typeErr = "FAILED tests/t.py::test_load - TypeError: 'NoneType' object is not subscriptable"
		attrErr = "FAILED tests/t.py::test_load - AttributeError: 'dict' object has no attribute 'id'"
		valErr  = "FAILED tests/t.py::test_load - ValueError: bad id"
	)
	runFamily(t, WhackAMole, []familyCase{
		// The loop it exists for: each fix brings the previous failure back.
		{name: "two errors taking turns x2", give: fixAndRun(keyErr, typeErr, keyErr, typeErr), want: stopped},
		{name: "three errors taking turns x2", give: fixAndRun(keyErr, typeErr, attrErr, keyErr, typeErr, attrErr), want: stopped},
		{name: "two errors taking turns, each seen twice in a row", give: fixAndRun(keyErr, keyErr, typeErr, typeErr, keyErr, typeErr), want: stopped},
		{name: "two errors taking turns x3", give: fixAndRun(keyErr, typeErr, keyErr, typeErr, keyErr, typeErr), want: stopped},

		// Healthy near-misses.
		{name: "a new error after each fix: debugging", give: fixAndRun(keyErr, typeErr, attrErr, valErr), want: healthy},
		{name: "two errors, then fixed", give: fixAndRun(keyErr, typeErr, ""), want: silent},
		{name: "two errors taking turns x2, then fixed", give: fixAndRun(keyErr, typeErr, keyErr, typeErr, ""), want: silent},
		{name: "errors of two scripts taking turns: tool_cycle's", give: rep(2, "bash:python a.py=>"+keyErr, "bash:python b.py=>"+typeErr), want: absent},
		{name: "only exit statuses taking turns", give: fixAndRun("exit status 1", "exit status 2", "exit status 1", "exit status 2"), want: absent},

		// Thresholds: whack_cycles N fires at N rounds, not at N-1.
		{name: "default whack_cycles 2: A,B,A", give: fixAndRun(keyErr, typeErr, keyErr), want: absent},
		{name: "whack_cycles 3: x2", give: fixAndRun(keyErr, typeErr, keyErr, typeErr), cfg: func(c *Config) { c.WhackCycles = 3 }, want: absent},
		{name: "whack_cycles 3: x3", give: fixAndRun(keyErr, typeErr, keyErr, typeErr, keyErr, typeErr), cfg: func(c *Config) { c.WhackCycles = 3 }, want: stopped},
	})
}
