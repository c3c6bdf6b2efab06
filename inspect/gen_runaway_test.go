package inspect

import (
	"fmt"
	"strings"
)

// runawayCases are the shapes real runs loop in that an earlier rule set
// missed, each beside its healthy twin: a file restored again and again
// among failing test runs and other edits (SWE-bench runs), a search
// repeated with trivial variations among other calls, OpenHands'
// context-window churn, and an error cycle broken by a success that did
// something new (goose restarts its error streak on a success).
func runawayCases() []genCase {
	var cs []genCase
	loop := func(id, fam string, b func() *conv) {
		cs = append(cs, genCase{id: id, expect: "loop", family: fam, build: b})
	}
	healthy := func(id string, b func() *conv) {
		cs = append(cs, genCase{id: id, expect: "no_loop", family: "healthy", build: b})
	}

	// A SWE-bench run: explore, reproduce, then rounds of different edits
	// to card.py (and a helper), each ending in the same failing test,
	// each undone with `git checkout`.
	const card = "astropy/io/fits/card.py"
	reproFail := rc(1, "Traceback (most recent call last):\n  File \"/testbed/reproduce.py\", line 6, in <module>\n    assert str(c) == expected, str(c)\nAssertionError: HIERARCH ESO IFM CL RADIUS = 0.009124999999999999 / [m] radius arround actuator to avoid")
	testFail := func(n int) string {
		return rc(1, fmt.Sprintf("F.....\n=================================== FAILURES ===================================\n______________________ test_float_repr_%d ______________________\nE       AssertionError: assert '0.009124999999999999' == '0.009125'\nFAILED astropy/io/fits/tests/test_header.py::test_float_repr - AssertionError\n1 failed, %d passed in 0.%02ds", n, 40+n, 30+n))
	}
	explore := func(c *conv) {
		c.bash("cd /testbed && grep -rn \"def _format_float\" astropy/io/fits/", rc(0, "astropy/io/fits/card.py:1300:def _format_float(value):"))
		c.call("", "str_replace_editor", map[string]any{"command": "view", "path": "/testbed/" + card, "view_range": []int{1290, 1330}},
			"  1300\tdef _format_float(value):\n  1301\t    value_str = f\"{value:.16G}\"\n  1302\t    if \".\" not in value_str and \"E\" not in value_str:\n  1303\t        value_str += \".0\"")
		c.bash("cd /testbed && grep -rn \"_format_float\" astropy/io/fits/*.py", rc(0, "astropy/io/fits/card.py:1265:        return _format_float(value)\nastropy/io/fits/card.py:1300:def _format_float(value):"))
		c.call("", "str_replace_editor", map[string]any{"command": "create", "path": "/testbed/reproduce.py", "file_text": "from astropy.io import fits\nc = fits.Card('HIERARCH ESO IFM CL RADIUS', 0.009125, '[m] radius arround actuator to avoid')\nexpected = 'HIERARCH ESO IFM CL RADIUS = 0.009125 / [m] radius arround actuator to avoid    '\nprint(repr(c))\nassert str(c) == expected, str(c)\n"}, "File created successfully at: /testbed/reproduce.py")
		c.bash("cd /testbed && python reproduce.py", reproFail)
		c.bash("cd /testbed && git log --oneline -3", rc(0, "a1b2c3d Merge pull request #14508\n9f8e7d6 Fix docs\n1234abc Bump version"))
		c.call("", "str_replace_editor", map[string]any{"command": "view", "path": "/testbed/astropy/io/fits/util.py", "view_range": []int{1, 40}}, "     1\timport numpy as np\n     2\tdef _str_to_num(val):\n     3\t    ...")
		c.bash("cd /testbed && python -c \"print(repr(0.009125), str(0.009125))\"", rc(0, "0.009125 0.009125"))
	}
	attempts := []struct{ old, new, helper string }{
		{"value_str = f\"{value:.16G}\"", "value_str = str(value)", "def _shorten(s):\n    return s[:20]"},
		{"value_str = f\"{value:.16G}\"", "value_str = repr(value).upper()", "def _fits_repr(v):\n    return repr(v)"},
		{"if \".\" not in value_str and \"E\" not in value_str:", "if len(value_str) > 20 or (\".\" not in value_str and \"E\" not in value_str):", "MAX_FLOAT_LEN = 20"},
	}
	round := func(c *conv, i int, restoreIt bool) {
		a := attempts[i]
		c.call("", "str_replace_editor", map[string]any{"command": "view", "path": "/testbed/" + card, "view_range": []int{1295 + i*3, 1320 + i*3}},
			fmt.Sprintf("  %d\tdef _format_float(value):\n  %d\t    value_str = f\"{value:.16G}\"", 1300, 1301))
		c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/testbed/" + card, "old_str": a.old, "new_str": a.new},
			fmt.Sprintf("The file /testbed/%s has been edited. Here's the result of running `cat -n` on a snippet:\n  1301\t    %s", card, a.new))
		c.call("", "str_replace_editor", map[string]any{"command": "insert", "path": "/testbed/astropy/io/fits/util.py", "insert_line": 40 + i, "new_str": a.helper},
			"The file /testbed/astropy/io/fits/util.py has been edited.")
		c.bash("cd /testbed && python reproduce.py", reproFail)
		c.bash("cd /testbed && python -m pytest astropy/io/fits/tests/test_header.py -x -q -k float", testFail(i))
		c.bash(fmt.Sprintf("cd /testbed && grep -n \"value_str\" %s | head -%d", card, 5+i), rc(0, "1301:    value_str = ...\n1302:    if \".\" not in value_str"))
		c.bash("cd /testbed && git diff --stat", rc(0, " astropy/io/fits/card.py | 2 +-\n astropy/io/fits/util.py | 3 +++\n 2 files changed, 4 insertions(+), 1 deletion(-)"))
		c.say(fmt.Sprintf("Attempt %d did not fix the float formatting; the test still fails.", i+1))
		if restoreIt {
			c.bash("cd /testbed && git checkout "+card, rc(0, "Updated 1 path from the index"))
			c.bash("cd /testbed && git checkout astropy/io/fits/util.py", rc(0, "Updated 1 path from the index"))
		}
		c.bash("cd /testbed && python -c \"import astropy; print(astropy.__version__)\"", rc(0, "5.3.dev1"))
	}
	loop("swebench-card-restored-three-times-tests-failing", "edit_undo", func() *conv {
		c := newConv(sysPrompt, "HIERARCH cards with floats get truncated comments: `io.fits.Card` uses a string representation of floats that is larger than necessary. Fix it.")
		explore(c)
		for i := range 3 {
			round(c, i, true)
		}
		return c
	})
	healthy("swebench-card-restored-once-then-fixed", func() *conv {
		c := newConv(sysPrompt, "HIERARCH cards with floats get truncated comments: `io.fits.Card` uses a string representation of floats that is larger than necessary. Fix it.")
		explore(c)
		round(c, 0, true)
		c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/testbed/" + card, "old_str": "value_str = f\"{value:.16G}\"",
			"new_str": "value_str = str(value)\n    if len(value_str) > 20:\n        value_str = f\"{value:.16G}\""}, "The file /testbed/"+card+" has been edited.")
		c.bash("cd /testbed && python reproduce.py", rc(0, "('HIERARCH ESO IFM CL RADIUS = 0.009125 / [m] radius arround actuator to avoid    ')"))
		c.bash("cd /testbed && python -m pytest astropy/io/fits/tests/test_header.py -x -q -k float", rc(0, "......\n6 passed in 0.41s"))
		c.bash("cd /testbed && python -m pytest astropy/io/fits/tests -x -q", rc(0, "1204 passed, 12 skipped in 41.20s"))
		c.bash("cd /testbed && git diff", rc(0, "diff --git a/astropy/io/fits/card.py b/astropy/io/fits/card.py\n-    value_str = f\"{value:.16G}\"\n+    value_str = str(value)"))
		return c
	})
	healthy("swebench-restored-each-file-once-across-a-refactor", func() *conv {
		c := newConv(sysPrompt, "Rename the `_format_float` helper to `format_float` across the package.")
		for i, f := range []string{"card.py", "header.py", "column.py", "hdu/base.py"} {
			p := "astropy/io/fits/" + f
			c.bash("cd /testbed && sed -i 's/_format_float/format_float/g' "+p, rc(0, ""))
			c.bash("cd /testbed && python -m pytest astropy/io/fits/tests -x -q", rc(1, fmt.Sprintf("E   ImportError: cannot import name '_format_float' from 'astropy.io.fits.%s'\n1 error in 0.%02ds", strings.TrimSuffix(f, ".py"), 20+i)))
			c.bash("cd /testbed && git checkout "+p, rc(0, "Updated 1 path from the index"))
			c.bash("cd /testbed && grep -rn \"import _format_float\" astropy/", rc(0, fmt.Sprintf("astropy/io/fits/%s:%d:from .card import _format_float", f, 10+i)))
			c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/testbed/" + p, "old_str": "_format_float", "new_str": "format_float"}, "The file /testbed/"+p+" has been edited.")
			c.bash("cd /testbed && python -m pytest astropy/io/fits/tests -x -q", rc(0, fmt.Sprintf("%d passed in %d.%02ds", 1200+i, 40+i, i)))
		}
		return c
	})

	// A search repeated with trivial variations, reads of other files
	// between, every search answering nothing.
	loop("search-trivial-variations-interleaved", "same_result", func() *conv {
		c := newConv(sysPrompt, "Find where template variables are resolved and make missing ones raise.")
		reads := []string{"django/template/base.py", "django/template/context.py", "django/template/engine.py", "django/template/defaulttags.py"}
		for i, q := range []string{"def resolve_lookup", "def resolve_lookup(", "def  resolve_lookup", "def resolve_lookup (", "def resolve_lookup(self"} {
			c.call("", "search_code", map[string]any{"query": q, "path": "django/"}, "No matches found.")
			if i < len(reads) {
				c.call("", "read_file", map[string]any{"path": reads[i], "start_line": 1, "end_line": 60},
					fmt.Sprintf("# %s\nimport re\nfrom django.utils.safestring import SafeData\nclass Node%d:\n    pass\n", reads[i], i))
			}
		}
		return c
	})
	loop("grep-trivial-variations-interleaved", "param_drift", func() *conv {
		c := newConv(sysPrompt, "Find the retry policy of the HTTP client and raise its limit.")
		for i, cmd := range []string{"grep -rn 'max_retries' src/", "grep -rn \"max_retries\" src/", "grep -rn 'max_retries' ./src/", "grep -rni 'max_retries' src/", "grep -rn 'max_retries ' src/"} {
			c.bash(cmd, rc(1, ""))
			c.bash(fmt.Sprintf("ls src/net/module_%d", i), rc(0, fmt.Sprintf("client_%d.py\n__init__.py", i)))
			c.bash(fmt.Sprintf("sed -n '1,30p' src/net/module_%d/client_%d.py", i, i), rc(0, fmt.Sprintf("class Client%d:\n    timeout = %d\n", i, 10+i)))
		}
		return c
	})
	healthy("search-refined-until-found", func() *conv {
		c := newConv(sysPrompt, "Find where template variables are resolved and make missing ones raise.")
		c.call("", "search_code", map[string]any{"query": "resolve", "path": "django/"}, strings.Repeat("django/template/base.py: resolve\n", 3)+"django/urls/resolvers.py: resolve\ndjango/db/models/expressions.py: resolve_expression\n(48 more matches)")
		c.call("", "read_file", map[string]any{"path": "django/urls/resolvers.py", "start_line": 1, "end_line": 40}, "class URLResolver:\n    def resolve(self, path): ...")
		c.call("", "search_code", map[string]any{"query": "resolve_lookup", "path": "django/"}, "django/template/base.py:852:    def _resolve_lookup(self, context):\ndjango/template/base.py:810: value = self._resolve_lookup(context)")
		c.call("", "search_code", map[string]any{"query": "def _resolve_lookup", "path": "django/template/"}, "django/template/base.py:852:    def _resolve_lookup(self, context):")
		c.call("", "read_file", map[string]any{"path": "django/template/base.py", "start_line": 840, "end_line": 900}, "    def _resolve_lookup(self, context):\n        current = context\n        try:\n            for bit in self.lookups:")
		c.call("", "edit_file", map[string]any{"path": "django/template/base.py", "old_string": "            for bit in self.lookups:", "new_string": "            for bit in self.lookups:  # resolve each bit"}, "The file has been edited.")
		c.bash("python -m pytest tests/template_tests -q", rc(0, "812 passed in 9.1s"))
		return c
	})

	// OpenHands: the conversation is condensed to fit the window, its
	// summary sent back as a user message in the condenser's own format,
	// and the agent re-reads what filled the window each time.
	ohSummary := func(i int) string {
		return fmt.Sprintf("STATE: /workspace/logs/app.log is large; reading it whole overflowed the context (%d)\nTESTS: None run\nCHANGES: None\nDEPS: None modified\nINTENT: Find the first ERROR in app.log and explain it", i)
	}
	bigLog := strings.Repeat("2024-05-01 12:00:00 INFO request served in 12ms\n", 60) + "[... Observation truncated due to length ...]"
	loop("openhands-context-window-condensed-again-and-again", "tool_repetition", func() *conv {
		c := newConv("You are OpenHands agent, a helpful AI assistant that can interact with a computer to solve tasks.", "Find the first ERROR in /workspace/logs/app.log and explain it.")
		for i := range 4 {
			c.call("Let me read the log file.", "execute_bash", map[string]any{"command": "cat /workspace/logs/app.log", "is_input": "false"}, bigLog)
			c.user(ohSummary(i))
		}
		return c
	})
	loop("openhands-context-window-errors-then-condensed", "tool_repetition", func() *conv {
		c := newConv("You are OpenHands agent, a helpful AI assistant that can interact with a computer to solve tasks.", "Find the first ERROR in /workspace/logs/app.log and explain it.")
		for i := range 4 {
			c.call("Let me view the log.", "str_replace_editor", map[string]any{"command": "view", "path": "/workspace/logs/app.log"}, bigLog)
			c.user(fmt.Sprintf("litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in %d tokens. Please reduce the length of the messages.\n[Error occurred in processing last action]", 280000+i*17))
			c.user("No events summarized")
		}
		return c
	})
	healthy("openhands-condensed-with-work-between", func() *conv {
		c := newConv("You are OpenHands agent, a helpful AI assistant that can interact with a computer to solve tasks.", "Add type hints to every module in src/.")
		for i := range 4 {
			f := fmt.Sprintf("src/mod_%d.py", i)
			c.call("", "str_replace_editor", map[string]any{"command": "view", "path": "/workspace/" + f}, fmt.Sprintf("def f%d(x):\n    return x + %d\n", i, i))
			c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/workspace/" + f, "old_str": fmt.Sprintf("def f%d(x):", i), "new_str": fmt.Sprintf("def f%d(x: int) -> int:", i)},
				fmt.Sprintf("The file /workspace/%s has been edited.", f))
			c.call("", "execute_bash", map[string]any{"command": "python -m mypy " + f}, rc(0, "Success: no issues found in 1 source file"))
			c.user(fmt.Sprintf("STATE: src/mod_0.py..src/mod_%d.py annotated\nTESTS: mypy clean on each\nCHANGES: type hints added to f0..f%d\nDEPS: None modified\nINTENT: Annotate every module", i, i))
		}
		return c
	})

	// goose's rule: a success of something new ends the error streak.
	healthy("error-cycle-broken-by-a-new-change", func() *conv {
		c := newConv(sysPrompt, "Make the service start.")
		cfgErr := rc(1, "Error: config key 'database.url' is missing\nerror: process exited with code 1")
		c.bash("./bin/service --config config/app.toml", cfgErr)
		c.bash("./bin/service --config ./config/app.toml", cfgErr)
		c.call("", "read_file", map[string]any{"path": "docs/configuration.md"}, "## database\nThe database section needs `url`, e.g. url = \"postgres://localhost/app\".\nOlder releases read `dsn` instead.")
		c.bash("sed -i 's/^dsn = /url = /' config/app.toml", rc(0, ""))
		c.bash("./bin/service --config config/app.toml --check", cfgErr)
		return c
	})
	healthy("error-cycle-broken-by-a-similar-but-new-edit", func() *conv {
		c := newConv(sysPrompt, "Fix the build.")
		buildErr := rc(101, "error[E0433]: failed to resolve: use of undeclared crate or module `serde_json`\n --> src/lib.rs:3:5\nerror: could not compile `app` due to previous error")
		c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/repo/src/lib.rs", "old_str": "use serde::Serialize;", "new_str": "use serde::{Serialize, Deserialize};"}, "The file /repo/src/lib.rs has been edited.")
		c.bash("cargo build", buildErr)
		c.bash("cargo build --offline", buildErr)
		c.call("", "str_replace_editor", map[string]any{"command": "str_replace", "path": "/repo/src/lib.rs", "old_str": "use serde::{Serialize, Deserialize};", "new_str": "use serde::{Serialize, Deserialize};\nuse serde_json;"}, "The file /repo/src/lib.rs has been edited.")
		c.bash("cargo build", buildErr)
		return c
	})
	loop("error-cycle-rereading-the-same-file-between", "error_cycle", func() *conv {
		c := newConv(sysPrompt, "Make the service start.")
		cfgErr := rc(1, "Error: config key 'database.url' is missing\nerror: process exited with code 1")
		for _, cmd := range []string{"./bin/service --config config/app.toml", "make run", "docker compose up --no-deps service", "go run ./cmd/service"} {
			c.bash(cmd, cfgErr)
			c.call("", "read_file", map[string]any{"path": "config/app.toml"}, "[server]\nport = 8080\n[database]\ndsn = \"postgres://localhost/app\"")
		}
		return c
	})
	return cs
}
