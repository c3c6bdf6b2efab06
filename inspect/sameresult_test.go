package inspect

import "testing"

func TestSameResult(t *testing.T) {
	similar := []string{`grep:{"pattern":"fooBar"}=>`, `grep:{"pattern":"foo_bar"}=>`, `grep:{"pattern":"fooBarr"}=>`, `grep:{"pattern":"FooBar"}=>`}
	unrelated := []string{`grep:{"pattern":"retry_budget"}=>`, `grep:{"pattern":"class Scheduler"}=>`, `grep:{"pattern":"MAX_CONNECTIONS"}=>`, `grep:{"pattern":"def teardown"}=>`}
	runFamily(t, SameResult, []familyCase{
		// The loop it exists for: every call differs, the answer does not.
		{name: "searches all empty, similar", give: similar[:3], want: stopped},
		{name: "similar paths, the same file-not-found", give: drifting("read_file", "Error: File not found",
			`{"path":"conf/app.yml"}`, `{"path":"conf/app.yaml"}`, `{"path":"config/app.yaml"}`), want: stopped},
		{name: "pages fetched with another query, the same 404", give: drifting("web_fetch", "Error: 404 Not Found",
			`{"url":"https://docs.example.com/api?v=1"}`, `{"url":"https://docs.example.com/api?v=2"}`, `{"url":"https://docs.example.com/api?v=3"}`), want: stopped},
		{name: "globs all empty", give: drifting("glob", "No files found",
			`{"pattern":"**/settings.py"}`, `{"pattern":"**/setting.py"}`, `{"pattern":"src/**/settings.py"}`), want: stopped},
		{name: "unrelated searches all empty x4: exploration gone on long", give: unrelated, want: warned},

		// Healthy near-misses.
		{name: "unrelated searches all empty x3: exploration", give: unrelated[:3], want: reported},
		{name: "searches that find things", give: []string{`grep:{"pattern":"fooBar"}=>a.go:1:fooBar()`, `grep:{"pattern":"foo_bar"}=>b.py:3:foo_bar = 1`, `grep:{"pattern":"fooBarr"}=>`}, want: silent},
		{name: "writes of different files acknowledged alike", give: drifting("write_file", "File written successfully.",
			`{"path":"a.py","content":"a = 1"}`, `{"path":"b.py","content":"b = 1"}`, `{"path":"c.py","content":"c = 1"}`, `{"path":"d.py","content":"d = 1"}`), want: silent},
		{name: "nothing found by different tools", give: []string{`grep:{"pattern":"fooBar"}=>`, `glob:{"pattern":"**/fooBar*"}=>`, "bash:find . -name 'fooBar*'=>"}, want: silent},
		{name: "one call again: tool_repetition's", give: rep(3, `grep:{"pattern":"fooBar"}=>`), want: absent},
		{name: "a search that finds at last", give: append(similar[:3:3], `grep:{"pattern":"foobar"}=>c.go:9:foobar := 1`), want: silent},

		// Thresholds: same_result_count N fires at N, not at N-1.
		{name: "default same_result_count 3: x2", give: similar[:2], want: absent},
		{name: "same_result_count 4: x3", give: similar[:3], cfg: func(c *Config) { c.SameResultCount = 4 }, want: absent},
		{name: "same_result_count 4: x4", give: similar, cfg: func(c *Config) { c.SameResultCount = 4 }, want: stopped},
	})
}
