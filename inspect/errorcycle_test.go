package inspect

import (
	"fmt"
	"testing"
)

// cell is a build line: a notebook cell failing with a syntax error at line.
func cell(code string, line int) string {
	return "execute_ipython_cell:" + `{"code":"` + code + `"}=>` + fmt.Sprintf("  Cell In[%d], line %d\n    x = [1, 2\n         ^\nSyntaxError: '[' was never closed", line, line)
}

func TestErrorCycle(t *testing.T) {
	sameErr := []string{"bash:python a.py=>ValueError: x", "bash:python b.py=>ValueError: x", "bash:python c.py=>ValueError: x", "bash:python d.py=>ValueError: x"}
	goFail := func(n int) string {
		return fmt.Sprintf("--- FAIL: TestHandle1 (0.00s)\n    h_test.go:12: got %d errors\nFAIL\nFAIL\texample.com/h\t0.0%ds", n, n)
	}
	runFamily(t, ErrorCycle, []familyCase{
		// The loop it exists for: the same error whatever call made it.
		{name: "same error x3", give: sameErr[:3], want: stopped},
		{name: "same error from three different tools", give: []string{
			"bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'", `run_tests:{"path":"t.py"}=>FAILED t.py::test_x - KeyError: 'id'`,
			"bash:python -m pytest t.py=>FAILED t.py::test_x - KeyError: 'id'"}, want: stopped},
		{name: "go test failing alike, counts in the message changing", give: []string{
			"bash:go test ./h=>" + goFail(9), "bash:go test -run TestHandle1 ./h=>" + goFail(8), "bash:go test -v ./h=>" + goFail(7)}, want: stopped},
		{name: "notebook syntax error at one line as the cell changes", give: []string{
			cell(`x = [1, 2\nprint(x)`, 1), cell(`x = [1, 2 \nprint(x)`, 1), cell(`x = [1,2\nprint(x)`, 1)}, want: stopped},
		{name: "same error x3 with reads between", give: []string{
			"bash:python a.py=>ValueError: x", "bash:cat a.py=>import b", "bash:python b.py=>ValueError: x", "bash:cat b.py=>x = 1",
			"bash:python c.py=>ValueError: x"}, want: stopped},

		// Healthy near-misses.
		{name: "two errors, a new step that succeeded, one error (goose restarts its streak)", give: []string{
			"bash:python a.py=>ValueError: bad\nexit code 1", "bash:python a.py=>ValueError: bad\nexit code 1",
			"bash:git stash=>Saved working directory", "bash:python a.py=>ValueError: bad\nexit code 1"}, want: healthy},
		{name: "the same error from other scripts, an install between", give: []string{
			"bash:python a.py=>ValueError: bad", "bash:python b.py=>ValueError: bad",
			"bash:pip install x=>Successfully installed x", "bash:python c.py=>ValueError: bad"}, want: healthy},
		{name: "different errors", give: []string{"bash:python a.py=>ValueError: x", "bash:python a.py --v=>KeyError: y", "bash:python a.py -q=>TypeError: z"}, want: healthy},
		{name: "same error after its script succeeded", give: []string{"bash:python a.py=>ValueError: x", "bash:python a.py=>ok", "bash:python a.py --v=>ValueError: x", "bash:python a.py -q=>ValueError: x"}, want: healthy},
		{name: "notebook syntax error moving as the cell changes", give: []string{
			cell(`x = [1, 2\nprint(x)`, 1), cell(`x = [1, 2]\ny = {1: 2\nprint(x)`, 2), cell(`x = [1, 2]\ny = {1: 2}\nz = (3\nprint(x)`, 3)}, want: healthy},
		{name: "a test fixed after two failing runs", give: []string{
			"bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'", `edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = load()"}=>ok`,
			"bash:pytest -q=>FAILED t.py::test_x - KeyError: 'id'", `edit_file:{"path":"a.py","old_string":"y = 1","new_string":"y = load()"}=>ok`,
			"bash:pytest -q=>3 passed"}, want: silent},
		{name: "same error x3, then the last script runs fine", give: append(sameErr[:3:3], "bash:python c.py=>done: 12 rows"), want: silent},
		{name: "the errors stopped: three calls since succeeded", give: append(sameErr[:3:3], "bash:ls=>a.py", "bash:cat a.py=>x = 1", "bash:git diff=>+x"), want: silent},
		{name: "only an exit status, the output changing", give: []string{
			"bash:make test=>3 tests failed\nexit status 1", "bash:make test V=1=>2 tests failed\nexit status 1", "bash:make check=>1 test failed\nexit status 1"}, want: absent},

		// Thresholds: error_count N fires at N, not at N-1.
		{name: "default error_count 3: x2", give: sameErr[:2], want: absent},
		{name: "error_count 4: x3", give: sameErr[:3], cfg: func(c *Config) { c.ErrorCount = 4 }, want: absent},
		{name: "error_count 4: x4", give: sameErr, cfg: func(c *Config) { c.ErrorCount = 4 }, want: stopped},
		{name: "model override error_count 4: x3", give: sameErr[:3],
			cfg: func(c *Config) { c.Models = map[string]Override{"test-model": {ErrorCount: 4}} }, want: absent},
		{name: "model override error_count 4: x4", give: sameErr,
			cfg: func(c *Config) { c.Models = map[string]Override{"test-model": {ErrorCount: 4}} }, want: stopped},
	})
}
