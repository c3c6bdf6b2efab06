package sse

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendString(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{`"plain"`, "plain"},
		{`""`, ""},
		{`"a\"b\\c\/d"`, `a"b\c/d`},
		{`"\b\f\n\r\t"`, "\b\f\n\r\t"},
		{`"\u00e9\u2603"`, "é☃"},
		{`"\ud83d\ude00"`, "😀"},
		{`"\ud83dx"`, "\uFFFDx"},       // lone high surrogate
		{`"\ude00"`, "\uFFFD"},         // lone low surrogate
		{`"\ud83d\u0041"`, "\uFFFDA"},  // high surrogate then a non-surrogate
		{`"\u12"`, `\u12`},             // short escape (invalid JSON, kept as it is)
		{`"x\"`, `x\`},                 // unterminated: never past the end
		{`null`, ""},                   // not a string
		{`"é raw utf8"`, "é raw utf8"}, // raw UTF-8 copied
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			if got := string(appendString(nil, tt.give)); got != tt.want {
				t.Errorf("appendString(%s) = %q; want %q", tt.give, got, tt.want)
			}
		})
	}
}

func TestIterators(t *testing.T) {
	obj := ` { "a" : 1 , "b":"x,}\"y", "c":{"d":[1,{"e":"]"}]}, "e\"k":[ ], "f":null} `
	var got []string
	it := newObjIter(obj)
	for it.next() {
		got = append(got, it.key+"="+it.val)
	}
	want := []string{`a=1`, `b="x,}\"y"`, `c={"d":[1,{"e":"]"}]}`, `e\"k=[ ]`, `f=null`}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("object members = %q; want %q", got, want)
	}
	got = nil
	arr := newArrIter(`[ 1, "a]", {"x":[]} ,[2] ,true]`)
	for arr.next() {
		got = append(got, arr.val)
	}
	want = []string{`1`, `"a]"`, `{"x":[]}`, `[2]`, `true`}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("array elements = %q; want %q", got, want)
	}
	for _, give := range []string{``, `[`, `{`, `{"a"`, `{"a":`, `["`, `x`, `{"a":"\`} {
		o, a := newObjIter(give), newArrIter(give)
		for o.next() {
		}
		for a.next() {
		}
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		give   string
		want   int
		wantOK bool
	}{
		{"0", 0, true},
		{"12", 12, true},
		{"-3", -3, true},
		{"1.9", 1, true},
		{`"2"`, 2, true},
		{"99999999999999999999999", 1 << 40, true},
		{"null", 0, false},
		{`""`, 0, false},
		{"-", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseInt(tt.give)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseInt(%q) = %d, %t; want %d, %t", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}

// FuzzAppendString checks the unescaper against encoding/json.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\\\""`, `"\/\b"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.Trim(s, " \t\r\n") != s {
			return // the iterators hand over tokens without surrounding space
		}
		got := appendString(nil, s)
		var want string
		if !utf8.ValidString(s) || json.Unmarshal([]byte(s), &want) != nil {
			return // encoding/json rewrites invalid UTF-8; we copy bytes
		}
		if string(got) != want {
			t.Errorf("appendString(%s) = %q; encoding/json %q", s, got, want)
		}
		it := newObjIter(`{"k":` + s + `}`)
		if !it.next() || it.val != s {
			t.Errorf("object iterator value %q; want %q", it.val, s)
		}
	})
}
