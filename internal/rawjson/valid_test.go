package rawjson

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// validCases are edge cases of the JSON grammar; want is what gjson says.
var validCases = []struct {
	name, give string
	want       bool
}{
	{"empty", "", false},
	{"space only", " \n\t\r", false},
	{"object", `{"a":1}`, true},
	{"empty containers", `{ } `, true},
	{"empty array spaced", "[ \n]", true},
	{"nested", `{"a":[1,{"b":[true,false,null]},"x"],"c":{}}`, true},
	{"trailing comma array", `[1,]`, false},
	{"trailing comma object", `{"a":1,}`, false},
	{"leading comma", `[,1]`, false},
	{"missing colon", `{"a" 1}`, false},
	{"key not string", `{a:1}`, false},
	{"unclosed", `{"a":[1,2}`, false},
	{"extra closer", `[1]]`, false},
	{"two values", `1 2`, false},
	{"leading zero", `01`, false},
	{"minus alone", `-`, false},
	{"fraction", `-0.5e+10`, true},
	{"bad fraction", `1.`, false},
	{"bad exponent", `1e`, false},
	{"true prefix", `tru`, false},
	{"truex", `[truex]`, false},
	{"escape ok", `"a\"b\\c\/\b\f\n\r\t\u00e9"`, true},
	{"bad escape", `"\x"`, false},
	{"short unicode", `"\u12"`, false},
	{"control char", "\"a\x01b\"", false},
	{"tab in string", "\"a\tb\"", false},
	{"del and high bytes", "\"a\x7f\xff\xfeb\"", true},
	{"unterminated", `"abc`, false},
	{"backslash at end", `"abc\`, false},
	{"quote after 8", `"abcdefghijklmnop"`, true},
	{"escape after 8", `"abcdefghij\"klmnop"`, true},
	{"control after 8", "\"abcdefghij\x1fklmnop\"", false},
	{"deep", strings.Repeat("[", 5000) + strings.Repeat("]", 5000), true},
	{"deep unbalanced", strings.Repeat("[", 5000) + strings.Repeat("]", 4999), false},
}

func TestValid(t *testing.T) {
	for _, tt := range validCases {
		t.Run(tt.name, func(t *testing.T) {
			if g := gjson.Valid(tt.give); g != tt.want {
				t.Fatalf("gjson.Valid(%q) = %v; the case's want %v is wrong", tt.give, g, tt.want)
			}
			if got := Valid([]byte(tt.give)); got != tt.want {
				t.Errorf("Valid(%q) = %v; want %v", tt.give, got, tt.want)
			}
		})
	}
}

// FuzzValid holds Valid to gjson.ValidBytes, the validator it
// replaces, on any input.
func FuzzValid(f *testing.F) {
	for _, tt := range validCases {
		f.Add([]byte(tt.give))
	}
	seeds, _ := filepath.Glob("../../inspect/testdata/parse/*.json")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 0 && data[0] == '[' && strings.Count(string(data), "[") > 10000 {
			return // gjson recurses: keep the reference from overflowing
		}
		if got, want := Valid(data), gjson.ValidBytes(data); got != want {
			t.Fatalf("Valid(%q) = %v; gjson.ValidBytes = %v", data, got, want)
		}
	})
}
