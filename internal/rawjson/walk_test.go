package rawjson

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
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

// member is one key and raw value that Members or gjson visited.
type member struct{ key, value string }

func membersOf(s string) []member {
	var got []member
	Members(s, func(k, v string) bool {
		got = append(got, member{k, v})
		return true
	})
	return got
}

// membersResumed is membersOf read as a caller that defers a long value
// does: MembersWith stops at member number stop, before its value is
// scanned, and MembersAfter resumes past the value.
func membersResumed(s string, stop int) []member {
	var got []member
	resume := -1
	MembersWith(s, func(k string, at int) int {
		end := ValueEnd(s, at)
		if end <= at {
			return -1
		}
		got = append(got, member{k, s[at:end]})
		if len(got) == stop+1 {
			resume = end
			return -1
		}
		return end
	})
	if resume >= 0 {
		MembersAfter(s, resume, func(k string, at int) int {
			end := ValueEnd(s, at)
			if end <= at {
				return -1
			}
			got = append(got, member{k, s[at:end]})
			return end
		})
	}
	return got
}

// gjsonMembers is what gjson's ForEach, which Members replaces, visits.
func gjsonMembers(s string) []member {
	var want []member
	gjson.Parse(s).ForEach(func(k, v gjson.Result) bool {
		want = append(want, member{k.Str, v.Raw})
		return true
	})
	return want
}

func TestMembers(t *testing.T) {
	tests := []struct {
		name, give string
		want       []member
	}{
		{"options after a long history", ` { "messages" : [{"role":"user","content":"a \"}\" ]"}],"stream":true, "n":2}`,
			[]member{{"messages", `[{"role":"user","content":"a \"}\" ]"}]`}, {"stream", "true"}, {"n", "2"}}},
		{"escaped key", `{"str\u0065am":false}`, []member{{"stream", "false"}}},
		{"empty object", `{}`, nil},
		{"not an object", `[{"a":1}]`, nil},
		{"truncated value", `{"model":"m","messages":[{"role":"us`, []member{{"model", `"m"`}, {"messages", `[{"role":"us`}}},
		{"missing colon", `{"model" "m","stream":true}`, nil},
		{"missing value", `{"model":,"stream":true}`, nil},
		{"truncated key", `{"mod`, nil},
		{"garbage after a member", `{"a":1 x "b":2}`, []member{{"a", "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := membersOf(tt.give); !slices.Equal(got, tt.want) {
				t.Errorf("Members(%q) = %q; want %q", tt.give, got, tt.want)
			}
			for stop := range len(tt.want) + 1 {
				if got := membersResumed(tt.give, stop); !slices.Equal(got, tt.want) {
					t.Errorf("stopped at member %d and resumed after it: %q; want %q", stop, got, tt.want)
				}
			}
		})
	}
	if got := membersOf(`{"a":1,"b":2,"c":3}`); len(got) != 3 {
		t.Fatalf("got %d members; want 3", len(got))
	}
	n := 0
	Members(`{"a":1,"b":2,"c":3}`, func(string, string) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("fn returning false after %d calls; want Members to stop at 2", n)
	}
}

// FuzzMembers holds Members to gjson's ForEach on every valid object, and
// to reading within its input on anything else.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,{"c":"}"}],"d":"\"x"}`, `{"k\"ey":null}`, ` { } `, `{"a":`} {
		f.Add(s)
	}
	seeds, _ := filepath.Glob("../../inspect/testdata/parse/*.json")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := membersOf(s) // must not panic, whatever s is
		for stop := range len(got) + 1 {
			if resumed := membersResumed(s, stop); !slices.Equal(resumed, got) {
				t.Fatalf("Members(%q) stopped at member %d and resumed after it = %q; want %q", s, stop, resumed, got)
			}
		}
		if !Valid(Bytes(s)) || !gjson.Parse(s).IsObject() {
			return
		}
		if want := gjsonMembers(s); !slices.Equal(got, want) {
			t.Fatalf("Members(%q) = %q; gjson ForEach = %q", s, got, want)
		}
	})
}

// BenchmarkMembers reads the top-level members of a 276 KB agent history
// (200 tool turns, the options after the messages) with Members and with
// gjson's ForEach, which it replaces.
func BenchmarkMembers(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"messages":[{"role":"system","content":"You are a coding agent."}`)
	for i := 0; sb.Len() < 276<<10; i++ {
		fmt.Fprintf(&sb, `,{"role":"assistant","content":"Step %d.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/file%d.go\"}"}}]}`, i, i, i)
		fmt.Fprintf(&sb, `,{"role":"tool","tool_call_id":"call_%d","content":%q}`, i, strings.Repeat(fmt.Sprintf("line %d of the file\n", i), 60))
	}
	sb.WriteString(`],"model":"m","stream":false}`)
	body := sb.String()
	for _, tt := range []struct {
		name    string
		members func(string) []member
	}{{"rawjson", membersOf}, {"gjson", gjsonMembers}} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for range b.N {
				if m := tt.members(body); len(m) != 3 {
					b.Fatalf("%d members; want 3", len(m))
				}
			}
		})
	}
}

// FuzzStringEnd holds StringEnd to a byte-at-a-time reading of a string
// that starts at the first byte, on any input.
func FuzzStringEnd(f *testing.F) {
	for _, s := range []string{`"ab\"c" ,`, `"a\\\\" x`, `"` + strings.Repeat(`x\\`, 20) + `\"y"`, `"abc`, `"`, `"0123456\"89abcdef\\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) == 0 || s[0] != '"' {
			return
		}
		want := len(s)
		for j := 1; j < len(s); j++ {
			if s[j] == '\\' {
				j++
			} else if s[j] == '"' {
				want = j + 1
				break
			}
		}
		if got := StringEnd(s, 0); got != want {
			t.Fatalf("StringEnd(%q) = %d; want %d", s, got, want)
		}
	})
}
