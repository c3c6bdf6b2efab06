package inspect

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The loops real agents fall into, each beside its non-loop twin, in the
// tool names, argument styles and result formats of the agents that
// produce them: Claude Code (Bash, Read, Edit with file_path/old_string/
// new_string), Codex (shell with an argv array, apply_patch, JSON-wrapped
// output), OpenHands (execute_bash, str_replace_editor), SWE-agent (open,
// goto, edit) and mini-swe-agent (bash, <returncode> output, text mode).

// genCases collects generated records.
type genCases []genCase

// loop adds a record that must be caught as a loop of category fam.
func (cs *genCases) loop(id, fam string, b func() *conv) {
	*cs = append(*cs, genCase{id: id, expect: "loop", family: fam, build: b})
}

// ok adds a record that must not be called a loop; fam groups it.
func (cs *genCases) ok(id, fam string, b func() *conv) {
	*cs = append(*cs, genCase{id: id, expect: "no_loop", family: fam, build: b})
}

// claudeBash adds a Claude Code Bash call.
func (c *conv) claudeBash(cmd, desc, out string) *conv {
	return c.call("", "Bash", map[string]any{"command": cmd, "description": desc}, out)
}

// claudeExit is the tool_result text Claude Code sends for a failed command.
func claudeExit(code int, out string) string {
	return fmt.Sprintf("Exit code %d\n%s", code, out)
}

// codexShell adds a Codex shell call with its argv form and JSON output.
func (c *conv) codexShell(cmd string, code int, out string, secs float64) *conv {
	res, _ := json.Marshal(map[string]any{"output": out, "metadata": map[string]any{"exit_code": code, "duration_seconds": secs}})
	return c.call("", "shell", map[string]any{"command": []string{"bash", "-lc", cmd}, "workdir": "/workspace/repo", "timeout_ms": 120000}, string(res))
}

// codexPatch adds a Codex apply_patch call updating one file.
func (c *conv) codexPatch(file, old, new string) *conv {
	patch := "*** Begin Patch\n*** Update File: " + file + "\n@@\n-" + strings.ReplaceAll(old, "\n", "\n-") + "\n+" + strings.ReplaceAll(new, "\n", "\n+") + "\n*** End Patch"
	res, _ := json.Marshal(map[string]any{"output": "Success. Updated the following files:\nM " + file + "\n", "metadata": map[string]any{"exit_code": 0, "duration_seconds": 0.0}})
	return c.call("", "apply_patch", map[string]any{"input": patch}, string(res))
}

// ohBash adds an OpenHands execute_bash call with its exit-code footer.
func (c *conv) ohBash(cmd string, code int, out string) *conv {
	return c.call("", "execute_bash", map[string]any{"command": cmd, "is_input": "false"}, fmt.Sprintf("%s\n[The command completed with exit code %d.]", out, code))
}

// ohEdit adds an OpenHands str_replace_editor str_replace call.
func (c *conv) ohEdit(path, old, new string) *conv {
	return c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": path, "old_str": old, "new_str": new},
		"The file "+path+" has been edited. Here's the result of running `cat -n` on a snippet of "+path+":\n    12\t"+strings.SplitN(new, "\n", 2)[0]+"\nReview the changes and make sure they are as expected. Edit the file again if necessary.")
}

// miniText adds a mini-swe-agent text-mode turn: a THOUGHT with one bash
// block, answered by a user-role <returncode> message.
func (c *conv) miniText(thought, cmd string, code int, out string) *conv {
	c.say("THOUGHT: " + thought + "\n\n```bash\n" + cmd + "\n```")
	return c.user(rc(code, out))
}

const importErr = "Traceback (most recent call last):\n  File \"/testbed/reproduce.py\", line 1, in <module>\n    from astropy.io import fits\n  File \"/testbed/astropy/io/fits/__init__.py\", line 74, in <module>\n    from . import card\n  File \"/testbed/astropy/io/fits/card.py\", line 12, in <module>\n    from .util import _str_to_num, _is_int\nImportError: cannot import name '_is_int' from 'astropy.io.fits.util' (/testbed/astropy/io/fits/util.py)"

// oscillationCases: the work tree going back to one state again and again
// (state oscillation), and restores that are normal work.
func oscillationCases() []genCase {
	var cs genCases
	cs.loop("mini-swe-cp-backup-restore-x5", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "<pr_description>Card.fromstring fails on float values with D exponent</pr_description>")
		c.miniText("Let me back up the file before changing it.", "cp astropy/io/fits/util.py astropy/io/fits/util.py.backup", 0, "")
		edits := []string{"sed -i 's/^def _is_int(/def _is_int_old(/' astropy/io/fits/util.py",
			"python - <<'EOF'\nimport re\ns=open('astropy/io/fits/util.py').read()\ns=s.replace('import numpy as np','import numpy as np\\nprint(\"DEBUG util\")')\nopen('astropy/io/fits/util.py','w').write(s)\nEOF",
			"sed -i '/^def _str_to_num/i import pdb' astropy/io/fits/util.py",
			"perl -0pi -e 's/def _is_int\\(val\\):/def _is_int(val, strict=False):/' astropy/io/fits/util.py",
			"sed -i 's/from .util import _str_to_num, _is_int/from .util import _str_to_num/' astropy/io/fits/util.py"}
		checks := [][2]string{
			{"python reproduce.py", importErr},
			{"python -c 'from astropy.io import fits'", "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n  File \"/testbed/astropy/io/fits/util.py\", line 3, in <module>\n    print(\"DEBUG util\")\nNameError: name 'np' is not defined"},
			{"python reproduce.py 2>&1 | tail -3", "  File \"/testbed/astropy/io/fits/util.py\", line 41\n    import pdb\nIndentationError: unexpected indent"},
			{"python -m pytest astropy/io/fits/tests/test_card.py -x -q 2>&1 | tail -5", "E   TypeError: _is_int() missing 1 required positional argument: 'strict'\nFAILED astropy/io/fits/tests/test_card.py::test_float_d_exponent\n1 failed, 3 passed in 0.81s"},
			{"python reproduce.py", "Traceback (most recent call last):\n  File \"/testbed/reproduce.py\", line 1, in <module>\n    from astropy.io import fits\nImportError: cannot import name '_is_int' from partially initialized module 'astropy.io.fits.card'"},
		}
		for i, e := range edits {
			c.miniText(fmt.Sprintf("Attempt %d: adjust the helper and rerun the reproduction.", i+1), e, 0, "")
			c.miniText("Check whether that works.", checks[i][0], 1, checks[i][1])
			c.miniText("That broke the import. Restore the file from the backup.", "cp astropy/io/fits/util.py.backup astropy/io/fits/util.py", 0, "")
		}
		return c
	})
	cs.loop("codex-git-checkout-between-edit-scripts-x6", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "Fix the TypeError raised by QuerySet.bulk_update with expressions")
		c.codexShell("rg -n 'def bulk_update' django/db/models/query.py", 0, "527:    def bulk_update(self, objs, fields, batch_size=None):\n", 0.1)
		fails := "Traceback (most recent call last):\n  File \"/workspace/repo/tests/run.py\", line 9, in <module>\n    Entry.objects.bulk_update(objs, ['n'])\n  File \"/workspace/repo/django/db/models/query.py\", line 569, in bulk_update\n    attr = Value(attr, output_field=field)\nTypeError: Value.__init__() got an unexpected keyword argument 'output_field'\n"
		scripts := []string{"sed -i 's/Value(attr, output_field=field)/Value(attr, field)/' django/db/models/query.py",
			"python - <<'PY'\np='django/db/models/query.py'\ns=open(p).read().replace('if not isinstance(attr, Expression):','if not hasattr(attr, \"resolve_expression\"):')\nopen(p,'w').write(s)\nPY",
			"sed -i '569s/.*/                    attr = Value(attr)/' django/db/models/query.py",
			"python - <<'PY'\np='django/db/models/query.py'\ns=open(p).read().replace('Value(attr, output_field=field)','Cast(Value(attr), field)')\nopen(p,'w').write(s)\nPY",
			"sed -i 's/from django.db.models.expressions import Case, Expression, F, Ref, Value, When/from django.db.models.expressions import Case, F, Value, When/' django/db/models/query.py",
			"perl -pi -e 's/output_field=field\\)/output_field=field.clone())/' django/db/models/query.py"}
		errs := []string{fails, strings.Replace(fails, "TypeError: Value.__init__() got an unexpected keyword argument 'output_field'", "django.db.utils.OperationalError: near \"WHEN\": syntax error", 1),
			strings.Replace(fails, "TypeError: Value.__init__() got an unexpected keyword argument 'output_field'", "AssertionError: 0 != 3", 1),
			strings.Replace(fails, "TypeError: Value.__init__() got an unexpected keyword argument 'output_field'", "NameError: name 'Cast' is not defined", 1),
			strings.Replace(fails, "TypeError: Value.__init__() got an unexpected keyword argument 'output_field'", "NameError: name 'Expression' is not defined", 1),
			strings.Replace(fails, "TypeError: Value.__init__() got an unexpected keyword argument 'output_field'", "AttributeError: 'IntegerField' object has no attribute 'clone'", 1)}
		for i, s := range scripts {
			c.codexShell(s, 0, "", 0.05+float64(i)/100)
			c.codexShell("python tests/run.py", 1, errs[i], 0.8+float64(i)/10)
			c.codexShell("git checkout django/db/models/query.py", 0, "Updated 1 path from the index\n", 0.02)
		}
		return c
	})
	cs.loop("claude-git-restore-or-checkout-same-file-x5", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "The date parser drops the timezone; make parse_ts keep it.")
		c.call("", "Read", map[string]any{"file_path": "/home/dev/app/src/timeparse.py"}, "     1\tfrom datetime import datetime\n     2\t\n     3\tdef parse_ts(s):\n     4\t    return datetime.strptime(s, '%Y-%m-%dT%H:%M:%S')\n")
		news := []string{"    return datetime.strptime(s, '%Y-%m-%dT%H:%M:%S%z')", "    return datetime.fromisoformat(s)", "    return datetime.strptime(s.replace('Z', '+0000'), '%Y-%m-%dT%H:%M:%S%z')", "    return dateutil.parser.isoparse(s)", "    return datetime.strptime(s[:19], '%Y-%m-%dT%H:%M:%S').astimezone()"}
		fail := "============================= test session starts ==============================\ncollected 12 items\n\ntests/test_timeparse.py ...F........\n\nFAILED tests/test_timeparse.py::test_roundtrip_utc - AssertionError: assert '2024-03-01T10:00:00' == '2024-03-01T10:00:00Z'\n========================= 1 failed, 11 passed in 0.31s ========================="
		for i, n := range news {
			c.call("", "Edit", map[string]any{"file_path": "/home/dev/app/src/timeparse.py", "old_string": "    return datetime.strptime(s, '%Y-%m-%dT%H:%M:%S')", "new_string": n},
				"The file /home/dev/app/src/timeparse.py has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n     3\tdef parse_ts(s):\n     4\t"+n)
			c.claudeBash("python -m pytest tests/test_timeparse.py -q", "Run the timeparse tests", claudeExit(1, strings.Replace(fail, "test_roundtrip_utc", []string{"test_roundtrip_utc", "test_naive_input", "test_offset_kept", "test_import", "test_local_time"}[i], 1)))
			if i%2 == 0 {
				c.claudeBash("git restore src/timeparse.py", "Revert the parser change", "")
			} else {
				c.claudeBash("git checkout -- src/timeparse.py", "Revert the parser change", "")
			}
		}
		return c
	})
	cs.loop("openhands-git-stash-after-failed-attempts-x5", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "Make the CSV exporter quote fields containing newlines.")
		fail := "F.\n=================================== FAILURES ===================================\n___________________________ test_newline_is_quoted ____________________________\nE       AssertionError: assert 'a,b\\nc' == 'a,\"b\\nc\"'\nFAILED tests/test_export.py::test_newline_is_quoted\n1 failed, 1 passed in 0.05s"
		for i := 0; i < 5; i++ {
			c.ohEdit("/workspace/exporter/csvout.py", "    return ','.join(fields)", fmt.Sprintf("    return ','.join(quote%d(f) for f in fields)", i))
			c.ohBash("cd /workspace/exporter && python -m pytest tests/test_export.py -q", 1, strings.Replace(fail, "test_newline_is_quoted", []string{"test_newline_is_quoted", "test_comma_is_quoted", "test_plain_not_quoted", "test_quote_is_doubled", "test_empty_field"}[i], 2))
			c.ohBash("cd /workspace/exporter && git stash", 0, fmt.Sprintf("Saved working directory and index state WIP on main: 3f2a9c1 exporter: first cut (%d)", i))
		}
		return c
	})
	cs.loop("codex-apply-patch-revert-and-redo", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "Speed up the CSV reader without breaking the tests")
		a, b := "    rows = [parse(l) for l in f]", "    rows = list(map(parse, f))"
		for i, e := range [][2]string{{a, b}, {b, a}, {a, b}} {
			c.codexPatch("reader/csvfast.py", e[0], e[1])
			c.codexShell("pytest -q tests/test_reader.py", 0, fmt.Sprintf("12 passed in %d.%02ds\n", 1+i%2, 13*i), 1.2)
		}
		return c
	})
	cs.loop("swe-agent-edit-open-file-undo-redo", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "Fix the off-by-one in paginate()")
		c.call("", "open", map[string]any{"path": "/repo/src/paging.py"}, "[File: /repo/src/paging.py (88 lines total)]\n33:        end = start + size - 1")
		a, b := "        end = start + size - 1\n", "        end = start + size\n"
		for _, e := range [][2]string{{a, b}, {b, a}, {a, b}} {
			c.call("", "edit", map[string]any{"search": e[0], "replace": e[1]}, "File updated. Please review the changes and make sure they are correct (correct indentation, no duplicate lines, etc). Edit the file again if necessary.")
			c.call("", "bash", map[string]any{"command": "python -m pytest tests/test_paging.py -q"}, "F.\nFAILED tests/test_paging.py::test_last_page - assert 9 == 10\n1 failed, 1 passed in 0.04s")
		}
		return c
	})
	cs.loop("openhands-undo-edit-after-each-attempt-x5", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "Make the CSV exporter quote fields containing newlines.")
		for i := 0; i < 5; i++ {
			c.ohEdit("/workspace/exporter/csvout.py", "    return ','.join(fields)", fmt.Sprintf("    return ','.join(q%d(f) for f in fields)", i))
			c.ohBash("cd /workspace/exporter && python -m pytest tests/test_export.py -q", 1, fmt.Sprintf("E       NameError: name 'q%d' is not defined\n1 failed, 1 passed in 0.05s", i))
			c.call("", "str_replace_editor", map[string]any{"command": "undo_edit", "path": "/workspace/exporter/csvout.py"}, "Last edit to /workspace/exporter/csvout.py undone successfully.")
		}
		return c
	})
	cs.loop("mini-swe-restore-then-new-attempt-in-one-command-x5", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "<pr_description>QuerySet.in_bulk() fails for fields with UniqueConstraint</pr_description>")
		c.bash("cp django/db/models/query.py /tmp/query.py.orig", rc(0, ""))
		fails := []string{"AttributeError: 'UniqueConstraint' object has no attribute 'field'", "NameError: name 'unique_fields' is not defined",
			"ValueError: in_bulk()'s field_name must be a unique field but 'slug' isn't.", "TypeError: 'NoneType' object is not iterable", "IndentationError: unexpected indent (query.py, line 689)"}
		for i, f := range fails {
			c.bash(fmt.Sprintf("cp /tmp/query.py.orig django/db/models/query.py && python /tmp/patch_%d.py && python reproduce.py", i), rc(1, "patched\nTraceback (most recent call last):\n  File \"/testbed/reproduce.py\", line 12, in <module>\n    Article.objects.in_bulk(field_name='slug')\n"+f))
			c.bash("sed -n '680,700p' django/db/models/query.py", rc(0, fmt.Sprintf("        if field_name != 'pk' and not opts.get_field(field_name).unique:  # v%d", i)))
		}
		return c
	})
	cs.ok("one-undo-edit-then-fix", "healthy_restore", func() *conv {
		c := newConv(sysPrompt, "Make the CSV exporter quote fields containing newlines.")
		c.ohEdit("/workspace/exporter/csvout.py", "    return ','.join(fields)", "    return ','.join(q(f) for f in fields)")
		c.ohBash("cd /workspace/exporter && python -m pytest tests/test_export.py -q", 1, "E       NameError: name 'q' is not defined\n1 failed, 1 passed in 0.05s")
		c.call("", "str_replace_editor", map[string]any{"command": "undo_edit", "path": "/workspace/exporter/csvout.py"}, "Last edit to /workspace/exporter/csvout.py undone successfully.")
		c.ohEdit("/workspace/exporter/csvout.py", "import io", "import csv\nimport io")
		c.ohEdit("/workspace/exporter/csvout.py", "    return ','.join(fields)", "    buf = io.StringIO()\n    csv.writer(buf).writerow(fields)\n    return buf.getvalue().rstrip('\\r\\n')")
		c.ohBash("cd /workspace/exporter && python -m pytest tests/test_export.py -q", 0, "..\n2 passed in 0.04s")
		return c
	})
	cs.ok("codex-patches-move-forward", "healthy_restore", func() *conv {
		c := newConv(sysPrompt, "Speed up the CSV reader without breaking the tests")
		steps := []string{"    rows = [parse(l) for l in f]", "    rows = list(map(parse, f))", "    rows = list(map(parse, f.readlines()))", "    rows = parse_all(f.read())"}
		for i := 1; i < len(steps); i++ {
			c.codexPatch("reader/csvfast.py", steps[i-1], steps[i])
			c.codexShell("pytest -q tests/test_reader.py", 0, "12 passed in 1.10s\n", 1.2)
		}
		return c
	})
	cs.ok("one-restore-then-fix", "healthy_restore", func() *conv {
		c := newConv(sysPrompt, "<pr_description>Card.fromstring fails on float values with D exponent</pr_description>")
		c.miniText("Back up the file first.", "cp astropy/io/fits/util.py astropy/io/fits/util.py.backup", 0, "")
		c.miniText("Try renaming the helper.", "sed -i 's/^def _is_int(/def _is_int_old(/' astropy/io/fits/util.py", 0, "")
		c.miniText("Run the reproduction script.", "python reproduce.py", 1, importErr)
		c.miniText("That broke the import. Restore the file from the backup.", "cp astropy/io/fits/util.py.backup astropy/io/fits/util.py", 0, "")
		c.miniText("Fix the exponent handling instead.", "sed -i \"s/value.replace('D', 'E')/value.replace('D', 'E').replace('d', 'e')/\" astropy/io/fits/card.py", 0, "")
		c.miniText("Run the reproduction script.", "python reproduce.py", 0, "1.5e+10\nOK")
		c.miniText("Run the card tests.", "python -m pytest astropy/io/fits/tests/test_card.py -q", 0, "........................................ [100%]\n40 passed in 1.20s")
		return c
	})
	cs.ok("restores-of-different-files-remove-debug-prints", "healthy_restore", func() *conv {
		c := newConv(sysPrompt, "Find out why the scheduler skips jobs, then clean up.")
		files := []string{"sched/core.py", "sched/queue.py", "sched/worker.py", "sched/clock.py", "sched/store.py", "sched/api.py"}
		for i, f := range files {
			c.codexShell(fmt.Sprintf("sed -i '1i import logging; logging.basicConfig(level=logging.DEBUG)' %s", f), 0, "", 0.01)
			c.codexShell("python -m sched.demo", 0, fmt.Sprintf("DEBUG:sched:%s loaded\njob-%d ran\n", f, i), 0.4)
			c.codexShell("git checkout "+f, 0, "Updated 1 path from the index\n", 0.02)
		}
		c.codexShell("git status --short", 0, "", 0.01)
		return c
	})
	cs.ok("branch-switches-are-not-restores", "healthy_restore", func() *conv {
		c := newConv(sysPrompt, "Compare the benchmark on main and on the feature branch.")
		for i := 0; i < 3; i++ {
			c.claudeBash("git checkout main", "Switch to main", "Switched to branch 'main'")
			c.claudeBash("go test -run XXX -bench Parse ./...", "Benchmark main", fmt.Sprintf("BenchmarkParse-8   \t  %d\t  %d ns/op", 10000+i, 1200+i*7))
			c.claudeBash("git checkout feature/fast-parse", "Switch to the feature branch", "Switched to branch 'feature/fast-parse'")
			c.claudeBash("go test -run XXX -bench Parse ./...", "Benchmark the branch", fmt.Sprintf("BenchmarkParse-8   \t  %d\t  %d ns/op", 20000+i, 800+i*5))
		}
		return c
	})
	return cs
}

// cycleCases: short cycles whose failing results come back unchanged
// (no-progress evidence), and cycles whose results move.
func cycleCases() []genCase {
	var cs genCases
	src := "     1\timport json\n     2\t\n     3\tdef load(path):\n     4\t    with open(path) as f:\n     5\t        return json.load(f)\n"
	cs.loop("claude-read-then-edit-not-found-x2", "tool_cycle", func() *conv {
		c := newConv(sysPrompt, "load() should return {} for an empty file")
		for _, old := range []string{"def load(path):\n    with open(path) as f:\n        return json.load(f)", "def load(path):\n  with open(path) as f:\n    return json.load(f)"} {
			c.call("", "Read", map[string]any{"file_path": "/home/dev/cfg/loader.py"}, src)
			c.call("", "Edit", map[string]any{"file_path": "/home/dev/cfg/loader.py", "old_string": old, "new_string": "def load(path):\n    with open(path) as f:\n        text = f.read()\n    return json.loads(text) if text.strip() else {}"},
				"<tool_use_error>String to replace not found in file.\nString: "+old+"</tool_use_error>")
		}
		return c
	})
	cs.loop("openhands-view-then-str-replace-no-match-x2", "tool_cycle", func() *conv {
		c := newConv(sysPrompt, "Handle a missing 'id' in to_row")
		view := "Here's the result of running `cat -n` on /workspace/app/rows.py:\n     1\tdef to_row(rec):\n     2\t\treturn [rec['id'], rec['name']]\n"
		for _, old := range []string{"    return [rec['id'], rec['name']]", "  return [rec['id'], rec['name']]"} {
			c.call("", "str_replace_editor", map[string]any{"command": "view", "path": "/workspace/app/rows.py"}, view)
			c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/workspace/app/rows.py", "old_str": old, "new_str": "    return [rec.get('id'), rec['name']]"},
				"ERROR:\nNo replacement was performed, old_str `"+old+"` did not appear verbatim in /workspace/app/rows.py.")
		}
		return c
	})
	cs.loop("codex-test-then-same-patch-fails-x2", "tool_cycle", func() *conv {
		c := newConv(sysPrompt, "Fix the rounding in invoice totals")
		fail := "FAILED tests/test_invoice.py::test_total_rounding - assert Decimal('10.004') == Decimal('10.00')\n1 failed, 14 passed in 0.42s\n"
		for i := 0; i < 2; i++ {
			c.codexShell("pytest -q tests/test_invoice.py", 1, fail, 0.9+float64(i)/10)
			res, _ := json.Marshal(map[string]any{"output": "error: patch failed: billing/invoice.py:41\nerror: billing/invoice.py: patch does not apply\n", "metadata": map[string]any{"exit_code": 1, "duration_seconds": 0.0}})
			c.call("", "apply_patch", map[string]any{"input": "*** Begin Patch\n*** Update File: billing/invoice.py\n@@\n-    return sum(l.amount for l in lines)\n+    return sum(l.amount for l in lines).quantize(Decimal('0.01'))\n*** End Patch"}, string(res))
		}
		return c
	})
	cs.loop("mini-swe-three-call-cycle-same-failure-x2", "tool_cycle", func() *conv {
		c := newConv(sysPrompt, "<pr_description>Header.fromfile crashes on CONTINUE cards</pr_description>")
		for i := 0; i < 2; i++ {
			c.bash("python reproduce.py", rc(1, "Traceback (most recent call last):\n  File \"/testbed/reproduce.py\", line 4, in <module>\n    h = fits.Header.fromfile('t.hdr')\n  File \"/testbed/astropy/io/fits/header.py\", line 512, in fromfile\n    raise ValueError('bad CONTINUE card')\nValueError: bad CONTINUE card"))
			c.bash("grep -n \"CONTINUE\" astropy/io/fits/header.py", rc(0, "498:        # CONTINUE cards extend the previous value\n511:            if not card.keyword == 'CONTINUE':\n512:                raise ValueError('bad CONTINUE card')"))
			c.bash("sed -n '495,520p' astropy/io/fits/header.py", rc(0, "        # CONTINUE cards extend the previous value\n        for card in cards:\n            if not card.keyword == 'CONTINUE':\n                raise ValueError('bad CONTINUE card')"))
		}
		return c
	})
	cs.loop("swe-agent-open-goto-edit-syntax-error-x2", "tool_cycle", func() *conv {
		c := newConv(sysPrompt, "Fix the off-by-one in paginate()")
		for _, rep := range []string{"        end = start + size\n", "            end = start + size\n"} {
			c.call("", "open", map[string]any{"path": "/repo/src/paging.py"}, "[File: /repo/src/paging.py (88 lines total)]\n(30 more lines above)\n31:    def paginate(self, page, size):\n32:        start = page * size\n33:        end = start + size - 1\n34:        return self.items[start:end]\n(54 more lines below)")
			c.call("", "goto", map[string]any{"line_number": 33}, "[File: /repo/src/paging.py (88 lines total)]\n(32 more lines above)\n33:        end = start + size - 1\n(55 more lines below)")
			c.call("", "edit", map[string]any{"search": "        end = start + size - 1\n", "replace": rep},
				"Your proposed edit has introduced new syntax error(s). Please read this error message carefully and then retry editing the file.\n\nERRORS:\n- E999 IndentationError: unexpected indent\n\nThis is how your edit would have looked if applied\n-------------------------------------------------\n33:"+rep+"-------------------------------------------------\nYour changes have NOT been applied. Please fix your edit command and try again.")
		}
		return c
	})
	cs.ok("read-edit-cycle-file-changes", "healthy_cycle", func() *conv {
		c := newConv(sysPrompt, "Add type hints to loader.py, one function at a time")
		body := src
		for i := 0; i < 4; i++ {
			c.call("", "Read", map[string]any{"file_path": "/home/dev/cfg/loader.py"}, body)
			old := fmt.Sprintf("def f%d(x):", i)
			c.call("", "Edit", map[string]any{"file_path": "/home/dev/cfg/loader.py", "old_string": old, "new_string": fmt.Sprintf("def f%d(x: int) -> int:", i)},
				"The file /home/dev/cfg/loader.py has been updated.")
			body += fmt.Sprintf("     %d\tdef f%d(x: int) -> int:\n", 6+i, i)
		}
		return c
	})
	cs.ok("test-and-read-cycle-errors-change", "healthy_cycle", func() *conv {
		c := newConv(sysPrompt, "<pr_description>Header.fromfile crashes on CONTINUE cards</pr_description>")
		errs := []string{"ValueError: bad CONTINUE card", "KeyError: 'CONTINUE'", "TypeError: can only concatenate str (not \"NoneType\") to str"}
		for i, e := range errs {
			c.bash("python reproduce.py", rc(1, "Traceback (most recent call last):\n  File \"/testbed/reproduce.py\", line 4, in <module>\n"+e))
			c.bash("sed -n '495,520p' astropy/io/fits/header.py", rc(0, fmt.Sprintf("        for card in cards:\n            # attempt %d\n", i)))
		}
		c.bash("python reproduce.py", rc(0, "parsed 3 cards"))
		return c
	})
	cs.ok("codex-different-patches-same-tool", "healthy_cycle", func() *conv {
		c := newConv(sysPrompt, "Rename Invoice.total to Invoice.amount_due everywhere")
		for _, f := range []string{"billing/invoice.py", "billing/report.py", "billing/api.py", "billing/export.py"} {
			c.codexPatch(f, "    total = invoice.total", "    total = invoice.amount_due")
			c.codexShell("pytest -q tests/", 0, fmt.Sprintf("%d passed in 0.5s\n", 40), 0.6)
		}
		return c
	})
	return cs
}

// volatileCases: the same call whose results differ only in volatile
// details (timestamps, durations, ids), and twins whose results differ in
// content.
func volatileCases() []genCase {
	var cs genCases
	vite := func(hash string, ms, kb float64) string {
		return fmt.Sprintf("\n> web@0.3.1 build\n> vite build\n\nvite v5.0.2 building for production...\ntransforming...\n✓ 34 modules transformed.\nrendering chunks...\ndist/index.html                   0.46 kB │ gzip:  0.30 kB\ndist/assets/index-%s.js  142.31 kB │ gzip: 45.83 kB\n✓ built in %.2fs\n(%.1f kB/s)", hash, ms, kb)
	}
	cs.loop("claude-build-hashed-assets-durations-x3", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "The production build shows a blank page; find out why.")
		for i, h := range []string{"4f9a2b1c", "9e03d7aa", "b71c20f5"} {
			c.claudeBash("npm run build", "Build the app", vite(h, 1.42+float64(i)*0.31, 812.5+float64(i)*40))
		}
		return c
	})
	cs.loop("codex-docker-ps-ids-ports-uptime-x3", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Why does the api container keep failing its health check?")
		for i, id := range []string{"3c1f9a7b2e4d", "8d2e0b6c1a9f", "f04a7e2b9c31"} {
			c.codexShell("docker ps --filter name=api", 0, fmt.Sprintf("CONTAINER ID   IMAGE        COMMAND                  CREATED          STATUS                            PORTS                     NAMES\n%s   api:latest   \"uvicorn app:app --h…\"   %d seconds ago   Up %d seconds (health: starting)   0.0.0.0:%d->8000/tcp   api\n", id, 8+i*11, 7+i*11, 49153+i*7), 0.2+float64(i)/20)
		}
		return c
	})
	cs.loop("mini-swe-train-progress-bars-x3", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "<pr_description>The tiny training run never lowers the loss</pr_description>")
		for i := 0; i < 3; i++ {
			bar := fmt.Sprintf("epoch 1:  30%%|███       | 3/10 [00:0%d<00:0%d, %.2fit/s]\repoch 1: 100%%|██████████| 10/10 [00:0%d<00:00, %.2fit/s]\nloss=2.3026 acc=0.100\nsaved checkpoint to /tmp/run-%d/ckpt.pt", 1+i, 2+i, 3.1+float64(i), 3+i, 3.4+float64(i)/3, 4100+i*37)
			c.miniText("Run the training script again to see the loss.", "python train.py --epochs 1", 0, bar)
		}
		return c
	})
	cs.loop("openhands-ipython-cell-counter-x3", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Find out why the frame has no rows")
		for i := 0; i < 3; i++ {
			c.call("", "execute_ipython_cell", map[string]any{"code": "df = pd.read_csv('data/sales.csv')\ndf.shape"}, fmt.Sprintf("Out[%d]: (0, 7)\n[Jupyter current working directory: /workspace]\n[Jupyter Python interpreter: /openhands/poetry/openhands-ai-5O4_aCHf-py3.12/bin/python]", 4+i))
		}
		return c
	})
	cs.ok("build-output-changes-in-content", "healthy_volatile", func() *conv {
		c := newConv(sysPrompt, "The production build shows a blank page; find out why.")
		for i, n := range []int{34, 35, 37} {
			c.claudeBash("npm run build", "Build the app", strings.Replace(vite(fmt.Sprintf("%08x", 0x4f9a2b1c+i*977), 1.4, 800), "34 modules", fmt.Sprintf("%d modules", n), 1))
			c.call("", "Edit", map[string]any{"file_path": "/home/dev/web/src/main.tsx", "old_string": fmt.Sprintf("import './m%d'", i), "new_string": fmt.Sprintf("import './m%d'\nimport './m%d'", i, i+1)}, "The file /home/dev/web/src/main.tsx has been updated.")
		}
		return c
	})
	cs.ok("docker-ps-status-changes", "healthy_volatile", func() *conv {
		c := newConv(sysPrompt, "Wait for the api container to become healthy")
		for i, st := range []string{"Up 5 seconds (health: starting)", "Up 31 seconds (health: starting)", "Up About a minute (healthy)"} {
			c.codexShell("docker ps --filter name=api", 0, fmt.Sprintf("CONTAINER ID   IMAGE        STATUS   PORTS   NAMES\n3c1f9a7b2e4d   api:latest   %s   0.0.0.0:49153->8000/tcp   api\n", st), 0.2+float64(i)/20)
		}
		return c
	})
	cs.ok("training-loss-goes-down", "healthy_volatile", func() *conv {
		c := newConv(sysPrompt, "<pr_description>The tiny training run never lowers the loss</pr_description>")
		for i, loss := range []string{"2.3026", "1.8710", "0.9342"} {
			c.miniText("Run the training script after the learning-rate change.", "python train.py --epochs 1", 0, fmt.Sprintf("epoch 1: 100%%|██████████| 10/10 [00:0%d<00:00, 3.%dit/s]\nloss=%s", 3+i, i, loss))
			c.miniText("Adjust the learning rate.", fmt.Sprintf("sed -i 's/lr=%d/lr=%d/' train.py", i, i+1), 0, "")
		}
		return c
	})
	return cs
}

// assistantErrorCases: the assistant's own turns failing the same way
// again and again (provider errors, empty answers), and turns that recover.
func assistantErrorCases() []genCase {
	var cs genCases
	ctxErr := func(n int) string {
		return fmt.Sprintf("litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - This model's maximum context length is 128000 tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", n)
	}
	cs.loop("openhands-context-window-error-turns-x3", "summary_loop", func() *conv {
		c := newConv(sysPrompt, "Refactor the payment module")
		c.ohBash("find /workspace/pay -name '*.py' | wc -l", 0, "214")
		c.call("", "str_replace_editor", map[string]any{"command": "view", "path": "/workspace/pay/core.py"}, strings.Repeat("# payment core\n", 40))
		for i := 0; i < 3; i++ {
			c.say(ctxErr(131072 + i*812)).user("Please continue working on the task.")
		}
		return c
	})
	cs.loop("chat-empty-answers-despite-new-questions-x3", "summary_loop", func() *conv {
		c := newConv("You are a helpful assistant.", "Summarise the attached meeting notes in five bullet points.")
		c.say("").user("Hello? You sent an empty reply.")
		c.say("").user("Please just list the decisions that were made.")
		c.say("")
		return c
	})
	cs.loop("cline-api-error-429-turns-x4", "summary_loop", func() *conv {
		c := newConv(sysPrompt, "Add pagination to the users endpoint")
		c.call("", "read_file", map[string]any{"path": "src/routes/users.ts"}, "export const list = (req, res) => res.json(db.users.all())")
		for i := 0; i < 4; i++ {
			c.say(fmt.Sprintf("API Request Failed\n\n429 Too Many Requests: rate limit exceeded for model claude-sonnet-4, retry after %d seconds (request id req_%06x)", 20+i*5, 0x3f9a21+i*77)).user("continue")
		}
		return c
	})
	cs.ok("one-provider-error-then-work-resumes", "healthy_assistant_error", func() *conv {
		c := newConv(sysPrompt, "Refactor the payment module")
		c.ohBash("find /workspace/pay -name '*.py' | wc -l", 0, "214")
		c.say(ctxErr(131072)).user("Please continue working on the task.")
		c.call("", "str_replace_editor", map[string]any{"command": "view", "path": "/workspace/pay/core.py", "view_range": []int{1, 40}}, "# payment core\n")
		c.ohBash("cd /workspace/pay && python -m pytest -q", 0, "52 passed in 3.10s")
		return c
	})
	cs.ok("explaining-different-provider-errors", "healthy_assistant_error", func() *conv {
		c := newConv("You are a helpful assistant.", "My script gets HTTP 429 from the API. What does that mean?")
		c.say("A 429 means you hit the rate limit: too many requests in a short time. Back off and retry with exponential delays.")
		c.user("And what about 'maximum context length exceeded'?")
		c.say("That error means the prompt plus the requested completion is longer than the model's context window; trim history or summarise it.")
		c.user("Last one: 503 service unavailable?")
		c.say("503 means the provider is overloaded or down for maintenance; retry later, it is not caused by your request.")
		return c
	})
	cs.ok("two-empty-replies-then-answer", "healthy_assistant_error", func() *conv {
		c := newConv("You are a helpful assistant.", "Summarise the attached meeting notes in five bullet points.")
		c.say("").user("Hello? You sent an empty reply.")
		c.say("").user("Please just list the decisions that were made.")
		c.say("- Ship v2 on May 6\n- Freeze the API\n- Hire one SRE\n- Drop the legacy importer\n- Review costs monthly")
		return c
	})
	return cs
}

// progressCases: work that repeats an action or a failure while making
// progress (warnings the detectors gave and should not),
// beside the loops they must stay apart from.
func progressCases() []genCase {
	var cs genCases
	cargoErr := "   Compiling ledger v0.4.0 (/home/dev/ledger)\nerror[E0308]: mismatched types\n  --> src/post.rs:88:20\n   |\n88 |     let amount: u64 = entry.amount;\n   |                 ---   ^^^^^^^^^^^^ expected `u64`, found `i64`\n\nerror: could not compile `ledger` (lib) due to 1 previous error"
	// Class 5: a rebuild after different edits is progress.
	cs.ok("claude-rebuild-after-different-edits-same-error", "healthy_test_after_edit", func() *conv {
		c := newConv(sysPrompt, "Make amounts signed throughout the ledger")
		edits := [][3]string{
			{"src/entry.rs", "pub amount: u64,", "pub amount: i64,"},
			{"src/account.rs", "fn credit(&mut self, v: u64) {\n        self.balance += v;", "fn credit(&mut self, v: i64) {\n        self.balance = self.balance.checked_add(v).expect(\"overflow\");"},
			{"src/report.rs", "writeln!(out, \"{:>12}\", total)?;", "writeln!(out, \"{:>+12}\", total)?;"},
			{"src/import.rs", "let amount = parts[2].parse::<u64>()?;", "let amount = parts[2].trim().parse::<i64>()?;"},
		}
		for _, e := range edits {
			c.call("", "Edit", map[string]any{"file_path": "/home/dev/ledger/" + e[0], "old_string": e[1], "new_string": e[2]}, "The file /home/dev/ledger/"+e[0]+" has been updated.")
			c.claudeBash("cargo build 2>&1 | tail -12", "Build the crate", claudeExit(101, cargoErr))
		}
		c.call("", "Edit", map[string]any{"file_path": "/home/dev/ledger/src/post.rs", "old_string": "let amount: u64 = entry.amount;", "new_string": "let amount: i64 = entry.amount;"}, "The file /home/dev/ledger/src/post.rs has been updated.")
		return c
	})
	cs.loop("claude-rebuild-after-same-edit-same-error", "test_fix_cycle", func() *conv {
		c := newConv(sysPrompt, "Make amounts signed throughout the ledger")
		for i := 0; i < 4; i++ {
			c.call("", "Edit", map[string]any{"file_path": "/home/dev/ledger/src/post.rs", "old_string": "let amount: u64 = entry.amount" + strings.Repeat(" ", i) + ";", "new_string": "let amount: u64 = entry.amount as u64" + strings.Repeat(" ", i+1) + ";"},
				"The file /home/dev/ledger/src/post.rs has been updated.")
			c.claudeBash("cargo build 2>&1 | tail -12", "Build the crate", claudeExit(101, cargoErr))
		}
		return c
	})
	// Class 6: different calls to the same tool.
	cs.ok("openhands-different-test-files-fail-differently", "healthy_different_calls", func() *conv {
		c := newConv(sysPrompt, "Find which test modules fail on Python 3.12")
		for i, m := range []string{"test_cache", "test_clock", "test_config", "test_codec", "test_crypto"} {
			c.ohBash("cd /workspace/lib && python -m pytest -q tests/"+m+".py", 1, fmt.Sprintf("E   %s\nFAILED tests/%s.py::test_roundtrip\n1 failed, %d passed in 0.2s",
				[]string{"DeprecationWarning: datetime.datetime.utcnow() is deprecated", "AttributeError: module 'time' has no attribute 'clock'", "ImportError: cannot import name 'SafeConfigParser'", "TypeError: a bytes-like object is required, not 'str'", "ModuleNotFoundError: No module named 'imp'"}[i], m, 6-i))
		}
		return c
	})
	cs.ok("codex-sed-different-files-same-ack", "healthy_different_calls", func() *conv {
		c := newConv(sysPrompt, "Replace the deprecated utcnow() calls")
		for _, f := range []string{"lib/cache.py", "lib/clock.py", "lib/config.py", "lib/codec.py", "lib/crypto.py"} {
			c.codexShell("sed -i 's/datetime.utcnow()/datetime.now(timezone.utc)/' "+f, 0, "", 0.01)
		}
		return c
	})
	// Class 7: the same error after an intervening success is a new attempt.
	cs.ok("same-error-after-a-success-is-new", "healthy_error_reset", func() *conv {
		c := newConv(sysPrompt, "Add the export and import commands")
		modErr := rc(1, "Traceback (most recent call last):\n  File \"/testbed/cli.py\", line 2, in <module>\n    import yaml\nModuleNotFoundError: No module named 'yaml'")
		c.bash("python cli.py export --help", modErr)
		c.bash("pip install pyyaml -q", rc(0, ""))
		c.bash("python cli.py export --help", rc(0, "usage: cli.py export [-h] PATH"))
		c.bash("git stash -q && git checkout -q import-branch && git stash pop -q", rc(0, ""))
		c.bash("python cli.py import --help", modErr)
		c.bash("pip install -r requirements.txt -q", rc(0, ""))
		c.bash("python cli.py import --help", modErr)
		return c
	})
	// Class 8: a repeated look whose answer changes each time.
	logTail := func(n int) string {
		var b strings.Builder
		b.WriteString("ERROR:worker:db connection refused, retrying in 5s\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "2024-05-06 10:0%d:%02d INFO worker: processed batch %d (%d rows)\n", 1+i/6, (i*10)%60, 100+i, 500+i*3)
		}
		return b.String()
	}
	cs.ok("claude-log-tail-grows-old-error-stays", "healthy_polling", func() *conv {
		c := newConv(sysPrompt, "Watch the worker until the backlog drains")
		for i := 0; i < 5; i++ {
			c.claudeBash("tail -n 20 logs/worker.log", "Check the worker log", logTail(3+i*2))
		}
		return c
	})
	cs.ok("growing-file-line-count", "healthy_polling", func() *conv {
		c := newConv(sysPrompt, "Wait for the export to finish writing")
		for i := 0; i < 5; i++ {
			c.ohBash("wc -l /workspace/out/export.csv", 0, fmt.Sprintf("%d /workspace/out/export.csv", 12000+i*4133))
		}
		return c
	})
	cs.ok("random-output-each-run", "healthy_polling", func() *conv {
		c := newConv(sysPrompt, "Check that the sampler gives different seeds")
		for _, v := range []string{"0.8443", "0.7579", "0.4205", "0.2589"} {
			c.bash("python -c 'import random; print(round(random.random(), 4))'", rc(0, v))
		}
		return c
	})
	cs.loop("claude-log-tail-unchanged-x3", "tool_repetition", func() *conv {
		c := newConv(sysPrompt, "Watch the worker until the backlog drains")
		for i := 0; i < 3; i++ {
			c.claudeBash("tail -n 20 logs/worker.log", "Check the worker log", logTail(4))
		}
		return c
	})
	return cs
}
