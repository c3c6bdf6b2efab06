package inspect

import (
	"fmt"
	"testing"
)

// TestProgress: the signs of progress that keep repeated failures from
// counting as error_cycle or test_fix_cycle, and their absence.
func TestProgress(t *testing.T) {
	const keyErr = "FAILED t.py::test_x - KeyError: 'id'"
	differentEdits := []string{
		`edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = load()"}=>ok`, "bash:pytest -q=>" + keyErr,
		`edit_file:{"path":"b.py","old_string":"def f(a):","new_string":"def f(a, strict=False):"}=>ok`, "bash:pytest -q=>" + keyErr,
		`edit_file:{"path":"c.py","old_string":"return rows","new_string":"return [r for r in rows if r]"}=>ok`, "bash:pytest -q=>" + keyErr,
		`edit_file:{"path":"d.py","old_string":"import json","new_string":"import json, logging"}=>ok`, "bash:pytest -q=>" + keyErr}
	// Two edits taking turns: the third attempt is the first again.
	twoEdits := []string{
		differentEdits[0], differentEdits[1], differentEdits[2], differentEdits[3],
		differentEdits[0], differentEdits[1], differentEdits[2], differentEdits[3]}
	logTail := func(news string) string {
		return fmt.Sprintf("bash:tail -4 app.log=>ERROR: db connection refused\nretrying in 5s\n%s\nwaiting for db", news)
	}
	readsBetween := []string{"bash:pytest -q=>" + keyErr, "bash:cat a.py=>x = 1", "bash:pytest -q=>" + keyErr,
		"bash:grep -n load a.py=>1: x = 1", "bash:pytest -q=>" + keyErr, "bash:cat t.py=>def test_x(): ...", "bash:pytest -q=>" + keyErr}
	t.Run("error_cycle", func(t *testing.T) {
		runFamily(t, ErrorCycle, []familyCase{
			// Each edit was new: the error streak restarts after each
			// (test_fix_cycle counts the runs).
			{name: "same error after different edits", give: differentEdits, want: absent},
			{name: "a log tail showing an old error above new lines", give: []string{
				logTail("db up: 3 of 5 replicas"), logTail("db up: 4 of 5 replicas"), logTail("db up: 5 of 5 replicas")}, want: silent},
			{name: "a log tail showing the same lines", give: rep(3, logTail("db up: 3 of 5 replicas")), want: stopped},
			{name: "same error with only reads between", give: readsBetween[:5], want: stopped},
			{name: "same error after edits that take turns", give: twoEdits, want: stopped},
		})
	})
	t.Run("test_fix_cycle", func(t *testing.T) {
		runFamily(t, TestFixCycle, []familyCase{
			{name: "same failing run after different edits", give: differentEdits, want: reported},
			{name: "same failing run with only reads between", give: readsBetween, want: stopped},
			{name: "same failing run after edits that take turns", give: twoEdits, want: stopped},
		})
	})
}
