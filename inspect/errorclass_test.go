package inspect

import "testing"

func TestClassifyError(t *testing.T) {
	tests := []struct {
		give     string
		isErr    bool
		wantKind string
	}{
		{"Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad value", true, "ValueError"},
		{"error: cannot find module", true, "error"},
		{"Error: File not found", true, "error"},
		{"ERROR collecting tests", true, "error"},
		{"Process finished with exit code 1", true, "exit 1"},
		{"<returncode>2</returncode>\n<output>\n\n</output>", true, "exit 2"},
		{"Exit status 2", true, "exit 2"},
		{"FAILED tests/t.py::test_a", true, "FAILED"},
		{"bash: foo: command not found", true, "command not found"},
		{"cat: x: No such file or directory", true, "ENOENT"},
		{"old_str not found in file", true, "edit no match"},
		{"ERROR:\nNo replacement was performed, old_str `x = 1` did not appear verbatim in /w/a.py.", true, "edit no match"},
		{"<tool_use_error>String to replace not found in file.\nString: x = 1</tool_use_error>", true, "edit no match"},
		{"The tool execution failed with the following error:\n<error>\nThe SEARCH block:\nx = 1\n...does not match anything in the file.\n</error>", true, "tool error"},
		{"open x: Permission denied", true, "EACCES"},
		{"  File \"x\", line 1\nSyntaxError: invalid syntax", true, "SyntaxError"},
		{"panic: runtime error: index out of range", true, "panic"},
		{"<returncode>0</returncode>\n<output>\nError: printed by the repro\n</output>", false, ""},
		{"all good\n3 passed", false, ""},
		{"exit code: unknown\nexit status 3", true, "exit 3"},
		{"build done\nwarning: x\nfatal: not a git repository", true, "fatal"},
		{"the log ends with fatal: ", false, ""},        // the marker's space is trimmed away
		{"FAILED: could not find x", true, "not found"}, // markers in list order, not by position
		{"Some Error: text", false, ""},
		{"pkg.mod.CustomException: boom", true, "CustomException"},
		{"    12\treturn 13\n", false, ""},
	}
	for _, tt := range tests {
		ei := classifyError(tt.give)
		if ei.isError != tt.isErr || (tt.isErr && ei.kind != tt.wantKind) {
			t.Errorf("classifyError(%q) = %v %q; want %v %q", tt.give, ei.isError, ei.kind, tt.isErr, tt.wantKind)
		}
	}
	sig := func(s string) string { d, _ := appendErrorSig(nil, nil, s); return string(d) }
	if a, b := sig(`File "/repo/a/x.py", line 10: KeyError 'id'`), sig(`File "/other/x.py", line 99: KeyError 'id'`); a != b {
		t.Errorf("error signature differs by path/line: %q vs %q", a, b)
	}
	if a, b := sig("No such file: /w/a.txt"), sig("No such file: /w/b.txt"); a == b {
		t.Errorf("error signature lost the file name: %q", a)
	}
	if a, b := sig("FAIL: TestHandle1: got 9 errors"), sig("FAIL: TestHandle2: got 8 errors"); a == b {
		t.Errorf("error signature lost the digits of a test name: %q", a)
	}
	if a, b := sig("FAIL: TestHandle1: got 9 errors"), sig("FAIL: TestHandle1: got 8 errors"); a != b {
		t.Errorf("error signature differs by a count: %q vs %q", a, b)
	}
}
