package inject

import (
	"bytes"
	"flag"
	"github.com/loopguard/loopguard/inspect"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, rewriting it under -update.
// insertChat is insert for a chat body whose layout the caller does not
// know, into a new slice.
func insertChat(body []byte, p Placement, text string) ([]byte, Placement, error) {
	return insert(nil, body, p, text, inspect.Layout{})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func readRequest(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "requests", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// untouched checks that out is body with one region replaced: the bytes
// around the edit are body's own. It returns the original bytes replaced
// ("" for a pure insertion) and the inserted bytes.
func untouched(body, out []byte) (removed, inserted string) {
	p := 0
	for p < len(body) && p < len(out) && body[p] == out[p] {
		p++
	}
	s := 0
	for s < len(body)-p && s < len(out)-p && body[len(body)-1-s] == out[len(out)-1-s] {
		s++
	}
	return string(body[p : len(body)-s]), string(out[p : len(out)-s])
}

// messageText returns a message's text: the string content, or the text of
// its last part.
func messageText(m gjson.Result) string {
	c := m.Get("content")
	if c.IsArray() {
		parts := c.Array()
		return parts[len(parts)-1].Get("text").String()
	}
	return c.String()
}

const sampleText = "[loopguard] Don't call `bash` with {\"command\":\"git status\"} again.\n\tÜnïcode ✓ </tag> \u2028 \\ end"

func TestInsert(t *testing.T) {
	tests := []struct {
		name      string // fixture in testdata/requests
		give      Placement
		wantUsed  Placement
		wantIndex int // the message that carries the text
		wantRole  string
		wantLen   int // messages afterwards
	}{
		{"ends-tool", Auto, Tool, 3, "tool", 4},
		{"ends-tool", Tool, Tool, 3, "tool", 4},
		{"ends-tool", User, User, 4, "user", 5},
		{"ends-tool", System, System, 0, "system", 4},
		{"ends-user", Auto, User, 1, "user", 2},
		{"ends-user", Tool, User, 1, "user", 2},
		{"ends-user", User, User, 1, "user", 2},
		{"ends-user", System, System, 0, "system", 2},
		{"ends-assistant", Auto, User, 2, "user", 3},
		{"ends-assistant", Tool, User, 2, "user", 3},
		{"ends-assistant", System, System, 0, "system", 3},
		{"parts-tool", Auto, Tool, 3, "tool", 4},
		{"parts-tool", User, User, 4, "user", 5},
		{"parts-tool", System, System, 0, "developer", 4},
		{"no-system", Auto, User, 4, "user", 5},
		{"no-system", Tool, Tool, 2, "tool", 4},
		{"no-system", System, System, 0, "system", 5},
		{"legacy-function", Auto, Tool, 2, "function", 3},
		{"null-tool-content", Auto, Tool, 2, "tool", 3},
		{"user-parts-empty", Auto, User, 1, "user", 2},
		{"user-parts-empty", System, System, 0, "system", 2},
		{"empty-messages", Auto, User, 0, "user", 1},
		{"empty-messages", System, System, 0, "system", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+string(tt.give), func(t *testing.T) {
			body := readRequest(t, tt.name)
			orig := bytes.Clone(body)
			out, used, err := insertChat(body, tt.give, sampleText)
			if err != nil {
				t.Fatalf("Insert: %v", err)
			}
			if !bytes.Equal(body, orig) {
				t.Fatal("Insert modified its input")
			}
			if used != tt.wantUsed {
				t.Errorf("insertChat(%s) used %s; want %s", tt.give, used, tt.wantUsed)
			}
			if !gjson.ValidBytes(out) {
				t.Fatalf("output is not valid JSON:\n%s", out)
			}
			msgs := gjson.GetBytes(out, "messages").Array()
			if len(msgs) != tt.wantLen {
				t.Fatalf("got %d messages; want %d", len(msgs), tt.wantLen)
			}
			m := msgs[tt.wantIndex]
			if r := m.Get("role").String(); r != tt.wantRole {
				t.Errorf("message %d has role %q; want %q", tt.wantIndex, r, tt.wantRole)
			}
			if got := messageText(m); !strings.HasSuffix(got, sampleText) {
				t.Errorf("message %d text = %q; want it to end with the injected text", tt.wantIndex, got)
			}
			// Everything outside the edit is the original bytes.
			removed, inserted := untouched(body, out)
			if removed != "" && removed != "null" {
				t.Errorf("Insert replaced original bytes %q", removed)
			}
			if !strings.Contains(inserted, `[loopguard] Don't call`) && !strings.Contains(inserted, `loopguard] Don't call`) {
				t.Errorf("inserted bytes %q do not hold the text", inserted)
			}
			checkTemplateSafe(t, out)
			golden(t, filepath.Join("insert", tt.name+"."+string(tt.give)+".json"), out)
		})
	}
}

// checkTemplateSafe checks what strict chat templates demand of a history:
// at most one system message and only first, no two user messages in a row.
func checkTemplateSafe(t *testing.T, body []byte) {
	t.Helper()
	prev := ""
	for i, m := range gjson.GetBytes(body, "messages").Array() {
		r := m.Get("role").String()
		if isSystemRole(r) && i > 0 {
			t.Errorf("system message at index %d", i)
		}
		if r == "user" && prev == "user" {
			t.Errorf("two user messages in a row at %d", i)
		}
		prev = r
	}
}

func TestInsertPreservesStringBytes(t *testing.T) {
	// The tool result holds escapes a re-encoder would rewrite (\u00e9, \/).
	body := []byte(`{"messages":[{"role":"tool","tool_call_id":"a","content":"caf\u00e9 \/tmp"}]}`)
	out, _, err := insertChat(body, Auto, "x")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"messages":[{"role":"tool","tool_call_id":"a","content":"caf\u00e9 \/tmp\n\nx"}]}`
	if string(out) != want {
		t.Errorf("Insert = %s; want %s", out, want)
	}
}

func TestInsertErrors(t *testing.T) {
	tests := []struct {
		name string
		give string
		want error
	}{
		{"no messages", `{"model":"m"}`, ErrNoMessages},
		{"messages not an array", `{"messages":{"role":"user"}}`, ErrNoMessages},
		{"message not an object", `{"messages":["hi"]}`, ErrMalformed},
		{"not JSON", `hello`, ErrNoMessages},
		{"empty", ``, ErrNoMessages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := insertChat([]byte(tt.give), Auto, "x")
			if err != tt.want {
				t.Errorf("insertChat(%s) error = %v; want %v", tt.give, err, tt.want)
			}
		})
	}
	if _, _, err := insertChat([]byte(`{"messages":[]}`), Placement("middle"), "x"); err == nil {
		t.Error("Insert with an unknown placement succeeded")
	}
}

func TestInsertContentOfOtherType(t *testing.T) {
	// A tool message whose content is an object cannot be extended: the text
	// goes into a new trailing user message instead.
	body := []byte(`{"messages":[{"role":"tool","tool_call_id":"a","content":{"x":1}}]}`)
	out, used, err := insertChat(body, Auto, "note")
	if err != nil {
		t.Fatal(err)
	}
	if used != User {
		t.Errorf("used %s; want user", used)
	}
	want := `{"messages":[{"role":"tool","tool_call_id":"a","content":{"x":1}},{"role":"user","content":"note"}]}`
	if string(out) != want {
		t.Errorf("Insert = %s; want %s", out, want)
	}
}

// TestInsertWithLayout holds the layout fast path to the scanning one: the
// same bytes for every placement it serves, and a fallback when the layout
// does not fit the body.
func TestInsertWithLayout(t *testing.T) {
	bodies := []string{
		`{"model":"m","messages":[{"role":"user","content":"go"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"a b"}]}`,
		`{"messages" : [ {"role":"system","content":"s"}, {"role":"user","content":[{"type":"text","text":"hi"}]} ], "model":"m"}`,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}],"stream":true}`,
	}
	for _, body := range bodies {
		tr, err := inspect.Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []Placement{Auto, User, Tool, System} {
			want, wantUsed, err := insertChat([]byte(body), p, "[loopguard] note")
			if err != nil {
				t.Fatal(err)
			}
			got, used, err := insert(make([]byte, 0, 4096), []byte(body), p, "[loopguard] note", tr.Layout)
			if err != nil || string(got) != string(want) || used != wantUsed {
				t.Errorf("%s in %s: with layout %q (%s, %v); scanning %q (%s)", p, body, got, used, err, want, wantUsed)
			}
			bad := tr.Layout
			bad.Last[0]++
			if got, _, err := insert(nil, []byte(body), p, "[loopguard] note", bad); err != nil || string(got) != string(want) {
				t.Errorf("%s: a layout that does not fit was used: %q", p, got)
			}
		}
	}
}
