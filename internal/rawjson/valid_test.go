package rawjson

import (
	"math"
	"os"
	"path/filepath"
	"slices"
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

// tapeRef is the tape of the valid document s as the scanning walkers
// find it: each value in document order, after those of its key, with
// its members or elements after it.
func tapeRef(s string) []TapeValue {
	var vals []TapeValue
	var walk func(i, key, keyEnd int) int // returns the value's end
	walk = func(i, key, keyEnd int) int {
		k := len(vals)
		vals = append(vals, TapeValue{Start: uint16(i), Key: uint16(key), KeyLen: uint8(keyEnd - key)})
		end := ValueEnd(s, i)
		switch s[i] {
		case '{':
			for j := SkipSpace(s, i+1); s[j] == '"'; {
				ke := StringEnd(s, j)
				at := SkipSpace(s, SkipSpace(s, ke)+1)
				j = SkipSpace(s, walk(at, j, ke))
				if s[j] == ',' {
					j = SkipSpace(s, j+1)
				}
			}
		case '[':
			for j := SkipSpace(s, i+1); s[j] != ']'; {
				j = SkipSpace(s, walk(j, 0, 0))
				if s[j] == ',' {
					j = SkipSpace(s, j+1)
				}
			}
		}
		vals[k].End, vals[k].After = uint16(end), uint8(min(len(vals), 255))
		return end
	}
	walk(SkipSpace(s, 0), 0, 0)
	return vals
}

// checkTape holds ValidTape to Valid and, on a valid document, its tape to
// tapeRef's: the same when the document has at most tapeMax values and is
// under 64 KiB, empty otherwise.
func checkTape(t *testing.T, data []byte) {
	t.Helper()
	var tape Tape
	tape.n = 3 // a tape from an earlier document
	ok := ValidTape(data, &tape)
	if want := Valid(data); ok != want {
		t.Fatalf("ValidTape(%q) = %v; Valid = %v", data, ok, want)
	}
	got := tape.Values()
	if !ok {
		if len(got) != 0 {
			t.Fatalf("ValidTape(%q) rejected it but kept %d values", data, len(got))
		}
		return
	}
	if strings.Count(string(data), "[") > 5000 {
		return // the reference recurses
	}
	want := tapeRef(string(data))
	if len(want) > tapeMax || len(data) > math.MaxUint16 || longKey(string(data)) {
		want = nil
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ValidTape(%q) = %+v; want %+v", data, got, want)
	}
}

// longKey reports whether the valid document s has a key of more than
// 255 bytes, quotes included, which no tape records.
func longKey(s string) bool {
	for _, v := range tapeRef(s) {
		if v.Key > 0 && StringEnd(s, int(v.Key))-int(v.Key) > math.MaxUint8 {
			return true
		}
	}
	return false
}

func TestValidTape(t *testing.T) {
	cases := []string{
		`{"id":"c","choices":[{"index":0,"delta":{"content":"a } ] \" {"},"finish_reason":null}],"usage":null}`,
		` { "a" : [ 1 , { "b" : [ ] } , { } , [ [ 2 ] ] ] } `,
		strings.Repeat("[", 31) + strings.Repeat("]", 31),
		strings.Repeat("[", 40) + strings.Repeat("]", 40),
		`[` + strings.Repeat(`{"x":[1]},`, 12) + `{}]`,
		`[` + strings.Repeat(`1,`, 30) + `1]`,
		`[` + strings.Repeat(`1,`, 31) + `1]`,
		`"no container"`,
		`{"long":"` + strings.Repeat("x", 1<<16) + `"}`,
		`{"` + strings.Repeat("k", 253) + `":1}`,
		`{"` + strings.Repeat("k", 254) + `":1}`,
	}
	for _, tt := range validCases {
		cases = append(cases, tt.give)
	}
	for _, c := range cases {
		checkTape(t, []byte(c))
	}
}

func FuzzValidTape(f *testing.F) {
	for _, tt := range validCases {
		f.Add([]byte(tt.give))
	}
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"x","tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`))
	f.Fuzz(checkTape)
}
