package inspect

import (
	"fmt"
	"testing"
)

// swaps returns n edits of path, each swapping back the one before it:
// x = 1 -> x = 2, x = 2 -> x = 1, ...
func swaps(n int, path string) []string {
	var out []string
	for i := 0; i < n; i++ {
		a, b := 1, 2
		if i%2 == 1 {
			a, b = b, a
		}
		out = append(out, fmt.Sprintf(`edit_file:{"path":"%s","old_string":"x = %d","new_string":"x = %d"}=>ok`, path, a, b))
	}
	return out
}

// restoreRounds returns n rounds of an edit script, a run answered with
// result(i) and a git checkout of the file.
func restoreRounds(n int, result func(i int) string) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("bash:sed -i s/v%d/w%d/ x.py=>", i, i), "bash:python x.py=>"+result(i), "bash:git checkout x.py=>")
	}
	return out
}

func TestEditUndo(t *testing.T) {
	okRun := func(i int) string { return fmt.Sprintf("ok %d", i) }
	runFamily(t, EditUndo, []familyCase{
		// The loop it exists for: the change applied again after its revert.
		{name: "edit, revert, edit again", give: swaps(3, "a.py"), want: stopped},
		{name: "whole-file writes going back and forth", give: []string{
			`write_file:{"path":"a.py","content":"A = 1\n"}=>ok`, `write_file:{"path":"a.py","content":"B = 2\n"}=>ok`,
			`write_file:{"path":"a.py","content":"A = 1\n"}=>ok`, `write_file:{"path":"a.py","content":"B = 2\n"}=>ok`}, want: stopped},
		{name: "Codex apply_patch reverted and applied again", history: func() *conv {
			c := newConv(sysPrompt, "Make the parser accept tabs")
			c.codexPatch("src/parse.rs", "let sep = ' ';", "let sep = '\\t';")
			c.codexPatch("src/parse.rs", "let sep = '\\t';", "let sep = ' ';")
			return c.codexPatch("src/parse.rs", "let sep = ' ';", "let sep = '\\t';")
		}, want: stopped},
		{name: "SWE-agent edits of the open file, no path in them", give: []string{
			`open:{"path":"src/app.py"}=>[File: src/app.py (40 lines total)]`,
			`edit:{"search":"x = 1","replace":"x = 2"}=>File updated.`, `edit:{"search":"x = 2","replace":"x = 1"}=>File updated.`,
			`edit:{"search":"x = 1","replace":"x = 2"}=>File updated.`}, want: stopped},
		{name: "restored 5 times after varied attempts", give: []string{"bash:sed -i s/a/b/ x.py=>", "bash:python x.py=>NameError: name 'b' is not defined", "bash:git checkout x.py=>",
			"bash:sed -i s/a/c/ x.py=>", "bash:python x.py=>SyntaxError: invalid syntax", "bash:git checkout x.py=>", "bash:sed -i s/b/d/ x.py=>", "bash:python x.py=>KeyError: 'd'",
			"bash:git checkout x.py=>", "bash:sed -i s/e/f/ x.py=>", "bash:python x.py=>TypeError: f", "bash:git checkout x.py=>",
			"bash:sed -i s/g/h/ x.py=>", "bash:python x.py=>IndexError: h", "bash:git checkout x.py=>"}, want: stopped},

		// Healthy near-misses.
		{name: "editing different parts of one file", give: []string{
			`edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = 2"}=>ok`, `edit_file:{"path":"a.py","old_string":"y = 1","new_string":"y = 2"}=>ok`,
			`edit_file:{"path":"a.py","old_string":"def f(a):","new_string":"def f(a, b=None):"}=>ok`}, want: silent},
		{name: "a debug print added, then removed", give: []string{
			`edit_file:{"path":"a.py","old_string":"def f(a):","new_string":"def f(a):\n    print(a)"}=>ok`, "bash:python a.py=>{'id': 3}",
			`edit_file:{"path":"a.py","old_string":"def f(a):\n    print(a)","new_string":"def f(a):"}=>ok`}, want: reported},
		{name: "restored 3 times, the same edit re-applied each round, failing alike", give: []string{
			"bash:grep -n load store.py=>12: def load(self):", "bash:sed -i s/load(/load_all(/ app.py=>",
			"bash:pytest -q=>FAILED test_app.py::test_load - AttributeError: 'Store' has no attribute 'load_all'", "bash:git checkout app.py=>Updated 1 path from the index",
			"bash:sed -n 1,40p store.py=>class Store:\n    def load(self):\n        return self.rows", "bash:sed -i s/load(/load_all(/ app.py=>",
			"bash:pytest -q=>FAILED test_app.py::test_load - AttributeError: 'Store' has no attribute 'load_all'", "bash:git restore app.py=>",
			"bash:git log --oneline -3 store.py=>a1b2c3d store: rename loader", "bash:sed -i s/load(/load_all(/ app.py=>",
			"bash:pytest -q=>FAILED test_app.py::test_load - AttributeError: 'Store' has no attribute 'load_all'", "bash:git checkout -- app.py=>"}, want: stopped},
		{name: "the work tree reset 3 times, the same edit re-applied, failing alike", give: []string{
			`edit_file:{"path":"src/db.py","old_string":"conn = open_db()","new_string":"conn = open_db(retries=3)"}=>ok`, "bash:make test=>FAIL: TestDB (timeout)\nexit code 2", "bash:git reset --hard=>HEAD is now at 1a2b3c4 init",
			"bash:cat src/db.py=>def open_db(): ...", `edit_file:{"path":"src/db.py","old_string":"conn = open_db()","new_string":"conn = open_db(retries=3)"}=>ok`, "bash:make test=>FAIL: TestDB (timeout)\nexit code 2", "bash:git reset --hard=>HEAD is now at 1a2b3c4 init",
			"bash:grep -rn open_db src=>src/db.py:3", `edit_file:{"path":"src/db.py","old_string":"conn = open_db()","new_string":"conn = open_db(retries=3)"}=>ok`, "bash:make test=>FAIL: TestDB (timeout)\nexit code 2", "bash:git reset --hard=>HEAD is now at 1a2b3c4 init"}, want: stopped},
		{name: "restored 3 times, a new edit each round, the run failing each time", give: []string{
			"bash:sed -i s/load(/load_all(/ app.py=>", "bash:pytest -q=>FAILED test_app.py::test_load - KeyError: 'id'", "bash:git checkout app.py=>",
			"bash:sed -i s/rows/rows or []/ app.py=>", "bash:pytest -q=>FAILED test_app.py::test_load - KeyError: 'id'", "bash:git checkout app.py=>",
			"bash:sed -i s/get(k)/get(k, None)/ app.py=>", "bash:pytest -q=>FAILED test_app.py::test_load - KeyError: 'id'", "bash:git checkout app.py=>"}, want: stopped},
		{name: "restored twice, a new edit each round, the run failing each time", give: []string{
			"bash:sed -i s/load(/load_all(/ app.py=>", "bash:pytest -q=>FAILED test_app.py::test_load - KeyError: 'id'", "bash:git checkout app.py=>",
			"bash:sed -i s/rows/rows or []/ app.py=>", "bash:pytest -q=>FAILED test_app.py::test_load - KeyError: 'id'", "bash:git checkout app.py=>"}, want: absent},
		{name: "restored 3 times, a new edit each round, one run passing", give: []string{
			"bash:sed -i s/load(/load_all(/ app.py=>", "bash:pytest -q=>FAILED test_app.py::test_load - KeyError: 'id'", "bash:git checkout app.py=>",
			"bash:sed -i s/rows/rows or []/ app.py=>", "bash:pytest -q=>3 passed in 0.12s", "bash:git checkout app.py=>",
			"bash:sed -i s/get(k)/get(k, None)/ app.py=>", "bash:pytest -q=>FAILED test_app.py::test_load - KeyError: 'id'", "bash:git checkout app.py=>"}, want: absent},
		{name: "restored 3 times, the same edit re-applied, the run changing", give: []string{
			"bash:sed -i s/N = 1/N = 2/ cfg.py=>", "bash:python bench.py=>12.1 req per worker", "bash:git checkout cfg.py=>",
			"bash:sed -i s/N = 1/N = 2/ cfg.py=>", "bash:python bench.py=>14.9 req per worker", "bash:git checkout cfg.py=>",
			"bash:sed -i s/N = 1/N = 2/ cfg.py=>", "bash:python bench.py=>13.3 req per worker", "bash:git checkout cfg.py=>"}, want: absent},
		{name: "restored 4 times after varied attempts", give: []string{"bash:sed -i s/a/b/ x.py=>", "bash:python x.py=>ok", "bash:git checkout x.py=>",
			"bash:sed -i s/a/c/ x.py=>", "bash:python x.py=>ok 2", "bash:git checkout x.py=>", "bash:sed -i s/b/d/ x.py=>", "bash:python x.py=>ok 3",
			"bash:git checkout x.py=>", "bash:sed -i s/e/f/ x.py=>", "bash:python x.py=>ok 4", "bash:git checkout x.py=>"}, want: healthy},
		{name: "the same swap in two files", give: append(swaps(1, "a.py"), swaps(2, "b.py")[1], swaps(1, "c.py")[0]), want: silent},
		{name: "a file's content growing", give: []string{
			`write_file:{"path":"a.py","content":"A = 1\n"}=>ok`, `write_file:{"path":"a.py","content":"A = 1\nB = 2\n"}=>ok`,
			`write_file:{"path":"a.py","content":"A = 1\nB = 2\nC = 3\n"}=>ok`, `write_file:{"path":"a.py","content":"A = 1\nB = 3\nC = 3\n"}=>ok`}, want: silent},
		{name: "swaps the editor rejected", give: []string{
			`edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = 2"}=>Error: old_string not found in a.py`,
			`edit_file:{"path":"a.py","old_string":"x = 2","new_string":"x = 1"}=>Error: old_string not found in a.py`}, want: absent},

		// Thresholds: edit_undo_count N reports at N reverts and stops at
		// N+1; state_returns N fires at N restores, not at N-1.
		{name: "default edit_undo_count 1: one revert", give: swaps(2, "a.py"), want: reported},
		{name: "edit_undo_count 2: one revert", give: swaps(2, "a.py"), cfg: func(c *Config) { c.EditUndoCount = 2 }, want: absent},
		{name: "edit_undo_count 2: two reverts", give: swaps(3, "a.py"), cfg: func(c *Config) { c.EditUndoCount = 2 }, want: reported},
		{name: "edit_undo_count 2: three reverts", give: swaps(4, "a.py"), cfg: func(c *Config) { c.EditUndoCount = 2 }, want: stopped},
		{name: "state_returns 4: 3 restores", give: restoreRounds(3, okRun), cfg: func(c *Config) { c.StateReturns = 4 }, want: absent},
		{name: "state_returns 4: 4 restores", give: restoreRounds(4, okRun), cfg: func(c *Config) { c.StateReturns = 4 }, want: warned},
	})
}
