package inspect

import (
	"fmt"
	"testing"
)

// drifting returns one call of tool per args, each answered with res.
func drifting(tool, res string, args ...string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = tool + ":" + a + "=>" + res
	}
	return out
}

func TestParamDrift(t *testing.T) {
	offsets := func(n int, res func(i int) string) []string {
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, fmt.Sprintf(`read_file:{"path":"big.log","offset":%d,"limit":50}=>%s`, 4000+i, res(i)))
		}
		return out
	}
	pastEnd := func(int) string { return "Error: offset 4000 is beyond the end of big.log (3120 lines)" }
	exprs := []string{`{"expression":"sum(rows[0:10])"}`, `{"expression":"sum(rows[0:11])"}`, `{"expression":"sum(rows[0:12])"}`, `{"expression":"sum(rows[0:13])"}`}
	in := &inspection{w: &work{}}
	sim := 1.0 // the least similarity of the expressions to the latest
	for _, a := range exprs[:3] {
		sim = min(sim, in.similarity(a, exprs[3]))
	}
	runFamily(t, ParamDrift, []familyCase{
		// The loop it exists for: exact hashing misses these.
		{name: "offset +1 each time, same error", give: offsets(4, pastEnd), want: stopped},
		{name: "old_string varied by whitespace, never matching", give: drifting("edit_file", "Error: old_string not found in a.py",
			`{"path":"a.py","old_string":"x = 1","new_string":"x = 2"}`, `{"path":"a.py","old_string":"x  = 1","new_string":"x = 2"}`,
			`{"path":"a.py","old_string":"x =  1","new_string":"x = 2"}`, `{"path":"a.py","old_string":" x = 1","new_string":"x = 2"}`), want: stopped},
		{name: "one URL fetched with drifting headers, the same 404", give: drifting("web_fetch", "Error: 404 Not Found",
			`{"url":"https://api.example.com/v1/items","headers":{"Accept":"application/json"}}`,
			`{"url":"https://api.example.com/v1/items","headers":{"Accept":"application/json; v=2"}}`,
			`{"url":"https://api.example.com/v1/items","headers":{"Accept":"*/*"}}`,
			`{"url":"https://api.example.com/v1/items","headers":{"Accept":"text/json"}}`), want: stopped},
		{name: "a long fixture: an Edit whose old_string never matches, x5", fixture: "drift/edit-old-string-never-matches.json", want: stopped},
		{name: "a query reworded, failing a different way each time", give: []string{
			`sql:{"query":"SELECT name FROM users WHERE id = 1"}=>ERROR: column \"name\" does not exist`,
			`sql:{"query":"SELECT username FROM users WHERE id = 1"}=>ERROR: permission denied for table users`,
			`sql:{"query":"SELECT user_name FROM users WHERE id = 1"}=>ERROR: relation \"users\" is locked`,
			`sql:{"query":"SELECT uname FROM users WHERE id = 1"}=>ERROR: syntax error at or near \"FROM\"`}, want: warned},

		// Healthy near-misses.
		{name: "paging a file: offsets move, content changes", give: offsets(6, func(i int) string { return fmt.Sprintf("%d: line of part %d", 4000+i, i) }), want: silent},
		{name: "a long fixture: reading a long file page by page", fixture: "drift/read-file-pages.json", want: silent},
		{name: "the same edit on many files (gemini-cli #5873)", give: drifting("bash", "",
			"sed -i 's/old.mod/new.mod/' pkg/a.py", "sed -i 's/old.mod/new.mod/' pkg/b.py", "sed -i 's/old.mod/new.mod/' pkg/c.py",
			"sed -i 's/old.mod/new.mod/' pkg/d.py", "sed -i 's/old.mod/new.mod/' pkg/e.py"), want: silent},
		{name: "editing different parts of one file", give: []string{
			`edit_file:{"path":"a.py","old_string":"x = 1","new_string":"x = 2"}=>ok`, `edit_file:{"path":"a.py","old_string":"y = 1","new_string":"y = 2"}=>ok`,
			`edit_file:{"path":"a.py","old_string":"z = 1","new_string":"z = 2"}=>ok`, `edit_file:{"path":"a.py","old_string":"w = 1","new_string":"w = 2"}=>ok`}, want: silent},
		{name: "editing different parts of one file, OpenHands' snippets", history: func() *conv {
			c := newConv(sysPrompt, "Rename the settings fields")
			for _, f := range []string{"host", "port", "user", "password", "timeout"} {
				c.ohEdit("/w/settings.py", f+" = None", f+": str = \"\"")
			}
			return c
		}, want: silent},
		{name: "a search narrowed until it finds", give: []string{
			`grep:{"pattern":"def parse_conf"}=>`, `grep:{"pattern":"def parse_config"}=>`, `grep:{"pattern":"def parse_cfg"}=>`,
			`grep:{"pattern":"def parse"}=>src/conf.py:12:def parse(path):`}, want: silent},

		// Thresholds: drift_count N fires at N similar calls, not at N-1;
		// drift_similarity is the least similarity that counts.
		{name: "default drift_count 4: x3", give: offsets(3, pastEnd), want: absent},
		{name: "drift_count 5: x4", give: offsets(4, pastEnd), cfg: func(c *Config) { c.DriftCount = 5 }, want: absent},
		{name: "drift_count 5: x5", give: offsets(5, pastEnd), cfg: func(c *Config) { c.DriftCount = 5 }, want: stopped},
		{name: "drift_similarity at the calls' similarity", give: drifting("calc", "Error: name 'rows' is not defined", exprs...),
			cfg: func(c *Config) { c.DriftSimilarity = sim }, want: stopped},
		{name: "drift_similarity above the calls' similarity", give: drifting("calc", "Error: name 'rows' is not defined", exprs...),
			cfg: func(c *Config) { c.DriftSimilarity = sim + 0.01 }, want: absent},
	})
}
