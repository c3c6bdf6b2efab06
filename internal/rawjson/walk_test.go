package rawjson

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestIndexBackslash(t *testing.T) {
	for n := 0; n < 150; n++ {
		for at := -1; at < n; at++ {
			b := []byte(strings.Repeat("a", n))
			if at >= 0 {
				b[at] = '\\'
				if at+1 < n {
					b[at+1] = '\\' // the first one counts
				}
			}
			if got, want := indexBackslash(string(b)), strings.IndexByte(string(b), '\\'); got != want {
				t.Fatalf("indexBackslash(%q) = %d; want %d", b, got, want)
			}
		}
	}
}

func TestWalkers(t *testing.T) {
	tests := []struct {
		name, give string
		at         int
		wantEnd    int
	}{
		{"string", `"ab\"c" ,`, 0, 7},
		{"escaped backslashes then quote", `"a\\\\" x`, 0, 7},
		{"long string", `"` + strings.Repeat("x", 100) + `\"y"`, 0, 105},
		{"object", ` {"a":[1,"]"],"b":{}} ,`, 1, 21},
		{"number", `-12.5e3,`, 0, 7},
		{"literal", `true]`, 0, 4},
		{"unterminated", `"abc`, 0, 4},
	}
	for _, tt := range tests {
		if got := ValueEnd(tt.give, SkipSpace(tt.give, tt.at)); got != tt.wantEnd {
			t.Errorf("%s: ValueEnd(%q) = %d; want %d", tt.name, tt.give, got, tt.wantEnd)
		}
	}
}

func TestAppendUnescaped(t *testing.T) {
	tests := []struct{ give, want string }{
		{`plain`, "plain"},
		{`a\nb\t\"c\\`, "a\nb\t\"c\\"},
		{`\u00e9\u4e2d`, "é中"},
		{`\ud83d\ude00`, "😀"},
		{`\ud83d alone`, string(utf8.RuneError) + " alone"},
		{strings.Repeat("x", 70) + `\n`, strings.Repeat("x", 70) + "\n"},
	}
	for _, tt := range tests {
		if got := string(AppendUnescaped(nil, tt.give)); got != tt.want {
			t.Errorf("AppendUnescaped(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}
