package inspect

import "testing"

func TestToolCycle(t *testing.T) {
	notMatched := func(old string) string {
		return `str_replace_editor:{"command":"str_replace","path":"/w/a.py","old_str":"` + old + `","new_str":"x = 2"}=>ERROR:
No replacement was performed, old_str ` + "`" + old + "`" + ` did not appear verbatim in /w/a.py.`
	}
	view := `str_replace_editor:{"command":"view","path":"/w/a.py"}=>     1	import os
     2	x  =  1
     3	print(x)`
	waitAndLook := []string{"bash:sleep 30 && curl -s localhost:8080/ready=>" + jobStatus, "bash:tail -3 deploy.log=>step 3 of 9: copying"}
	runFamily(t, ToolCycle, []familyCase{
		// The loop it exists for, in lengths OpenHands (2 only) and
		// gemini-cli (5 rounds: 10 calls for 2, 25 for 5) are slow to see.
		{name: "cycle A,B x3", give: rep(3, "bash:cat a=>A", "bash:cat b=>B"), want: stopped},
		{name: "cycle A,B,C x5", give: rep(5, "bash:cat a=>A", "bash:cat b=>B", "bash:cat c=>C"), want: stopped},
		{name: "cycle of 5 x5", give: rep(5, "bash:cat a=>A", "bash:cat b=>B", "bash:cat c=>C", "bash:cat d=>D", "bash:cat e=>E"), want: stopped},
		{name: "cycle A,B,C x3, C failing alike", give: rep(3, "bash:cat a.py=>A", "bash:vi a.py=>ok", "bash:python a.py=>ValueError: bad"), want: stopped},
		{name: "cycle A,B x2, B failing alike", give: rep(2, "bash:cat a.py=>A", "bash:python a.py=>ValueError: bad"), want: stopped},
		{name: "view, then an edit whose old_str matches nothing, x2 (gemini-cli #3919)",
			give: []string{view, notMatched("x = 1"), view, notMatched("x=1")}, want: stopped},
		{name: "cycle after other work", give: append([]string{"bash:git log -1=>commit abc", "bash:ls=>a b"}, rep(3, "bash:cat a=>A", "bash:cat b=>B")...), want: stopped},

		// Healthy near-misses.
		{name: "cycle A,B x2 only", give: rep(2, "bash:cat a=>A", "bash:cat b=>B"), want: reported},
		// gemini-cli waits for five rounds of a cycle of three or more.
		{name: "cycle A,B,C x3", give: rep(3, "bash:cat a=>A", "bash:cat b=>B", "bash:cat c=>C"), want: silent},
		{name: "cycle A,B,C x4", give: rep(4, "bash:cat a=>A", "bash:cat b=>B", "bash:cat c=>C"), want: healthy},
		{name: "cycle A,B,C x3, no results yet", give: rep(3, "bash:cat a=>", "bash:cat b=>", "bash:cat c=>"), want: silent},
		{name: "cycle of 5 x4", give: rep(4, "bash:cat a=>A", "bash:cat b=>B", "bash:cat c=>C", "bash:cat d=>D", "bash:cat e=>E"), want: healthy},
		{name: "cycle A,B x2, B failing differently", give: []string{"bash:cat a.py=>A", "bash:python a.py=>ValueError: bad", "bash:cat a.py=>A", "bash:python a.py=>KeyError: k"}, want: healthy},
		{name: "OpenHands' not-stuck history: ls, view, pwd, view, pwd, view", give: []string{
			"bash:ls=>a.py b.py", "str_replace_editor:{\"command\":\"view\",\"path\":\"/w/a.py\"}=>x = 1",
			"bash:pwd=>/w", "str_replace_editor:{\"command\":\"view\",\"path\":\"/w/b.py\"}=>y = 2",
			"bash:pwd=>/w", "str_replace_editor:{\"command\":\"view\",\"path\":\"/w/b.py\"}=>y = 2"}, want: healthy},
		{name: "reading the log and running the tests x3, failures going down", give: []string{
			"bash:cat log=>run 1", "bash:pytest -q=>3 failed, 7 passed", "bash:cat log=>run 2", "bash:pytest -q=>2 failed, 8 passed",
			"bash:cat log=>run 3", "bash:pytest -q=>1 failed, 9 passed"}, want: healthy},
		{name: "waiting for a deploy: sleep and look x5", give: rep(5, waitAndLook...), want: silent},
		{name: "edits of other places of one file between test runs", give: []string{
			`edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = 2"}=>ok`, "bash:pytest -q=>1 failed",
			`edit_file:{"path":"a.py","old_string":"y = 1","new_string":"y = 2"}=>ok`, "bash:pytest -q=>1 failed",
			`edit_file:{"path":"a.py","old_string":"z = 1","new_string":"z = 2"}=>ok`, "bash:pytest -q=>1 failed"}, want: absent},

		// Thresholds: cycle_repeats N reports at N rounds and stops at N+1
		// (or at N when every round fails alike); a wait multiplies N.
		{name: "cycle_repeats 3: x2", give: rep(2, "bash:cat a=>A", "bash:cat b=>B"), cfg: func(c *Config) { c.CycleRepeats = 3 }, want: silent},
		{name: "cycle_repeats 3: x3", give: rep(3, "bash:cat a=>A", "bash:cat b=>B"), cfg: func(c *Config) { c.CycleRepeats = 3 }, want: reported},
		{name: "cycle_repeats 3: x4", give: rep(4, "bash:cat a=>A", "bash:cat b=>B"), cfg: func(c *Config) { c.CycleRepeats = 3 }, want: stopped},
		{name: "cycle_repeats 3: x3, failing alike", give: rep(3, "bash:cat a.py=>A", "bash:python a.py=>ValueError: bad"),
			cfg: func(c *Config) { c.CycleRepeats = 3 }, want: stopped},
		{name: "waiting cycle: x5 of 6", give: rep(5, waitAndLook[0], "bash:tail -3 deploy.log=>step 3 of 9"), want: absent},
		{name: "waiting cycle: x7 of 6", give: rep(7, waitAndLook[0], "bash:tail -3 deploy.log=>step 3 of 9"), want: stopped},
		{name: "disabled for the model", give: rep(4, "bash:cat a=>A", "bash:cat b=>B"),
			cfg: func(c *Config) { c.Models = map[string]Override{"test-*": {Disable: []string{"tool_cycle"}}} }, want: absent},
	})
}
