package rawjson

import "testing"

func TestAppendEscaped(t *testing.T) {
	tests := []struct{ give, want string }{
		{"plain", "plain"},
		{"q\"b\\", `q\"b\\`},
		{"n\nr\rt\t", `n\nr\rt\t`},
		{"\x00\x1f", `\u0000\u001f`},
		{"bad\xffutf8", `bad\ufffdutf8`},
		{"ls\u2028ps\u2029", `ls\u2028ps\u2029`},
		{"<html>&", "<html>&"},
		{"ü✓😀", "ü✓😀"},
	}
	for _, tt := range tests {
		if got := string(AppendEscaped(nil, tt.give)); got != tt.want {
			t.Errorf("AppendEscaped(%q) = %s; want %s", tt.give, got, tt.want)
		}
		s := AppendQuote(nil, tt.give)
		if !Valid(s) {
			t.Errorf("AppendQuote(%q) = %s is not valid JSON", tt.give, s)
		}
	}
}
