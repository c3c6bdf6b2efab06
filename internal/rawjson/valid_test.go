package rawjson

import (
	"math"
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

// checkEnds holds ValidEnds to Valid and, on a valid document, each end it
// recorded to ValueEnd's scan: the first endsMax non-empty containers, in
// the order they open.
func checkEnds(t *testing.T, data []byte) {
	t.Helper()
	var e Ends
	ok := ValidEnds(data, &e)
	if want := Valid(data); ok != want {
		t.Fatalf("ValidEnds(%q) = %v; Valid = %v", data, ok, want)
	}
	if !ok {
		if e.n != 0 {
			t.Fatalf("ValidEnds(%q) rejected it but kept %d ends", data, e.n)
		}
		return
	}
	s := string(data)
	var starts []int
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			i = StringEnd(s, i) - 1
		case '{', '[':
			if j := SkipSpace(s, i+1); s[j] != '}' && s[j] != ']' {
				starts = append(starts, i)
			}
		}
	}
	want := min(len(starts), endsMax)
	if len(data) > math.MaxUint16 {
		want = 0 // too long to remember
	}
	if int(e.n) != want {
		t.Fatalf("ValidEnds(%q) kept %d ends; want %d", data, e.n, want)
	}
	if want == 0 {
		return
	}
	for k, at := range starts[:want] {
		if got, want := e.End(at), ValueEnd(s, at); got != want {
			t.Fatalf("ValidEnds(%q): container %d at %d ends at %d; ValueEnd says %d", data, k, at, got, want)
		}
	}
	if len(starts) > endsMax {
		if got := e.End(starts[endsMax]); got != -1 {
			t.Fatalf("ValidEnds(%q): container %d, past the first %d, ends at %d; want -1 (unknown)", data, endsMax, endsMax, got)
		}
	}
	if e.End(len(s)) != -1 {
		t.Fatalf("ValidEnds(%q): End past the document = %d; want -1", data, e.End(len(s)))
	}
}

func TestValidEnds(t *testing.T) {
	cases := []string{
		`{"id":"c","choices":[{"index":0,"delta":{"content":"a } ] \" {"},"finish_reason":null}],"usage":null}`,
		` { "a" : [ 1 , { "b" : [ ] } , { } , [ [ 2 ] ] ] } `,
		strings.Repeat("[", 40) + strings.Repeat("]", 40),
		`[` + strings.Repeat(`{"x":[1]},`, 12) + `{}]`,
		`"no container"`,
		`{"long":"` + strings.Repeat("x", 1<<16) + `"}`,
	}
	for _, tt := range validCases {
		cases = append(cases, tt.give)
	}
	for _, c := range cases {
		checkEnds(t, []byte(c))
	}
}

func FuzzValidEnds(f *testing.F) {
	for _, tt := range validCases {
		f.Add([]byte(tt.give))
	}
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"x","tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`))
	f.Fuzz(checkEnds)
}
