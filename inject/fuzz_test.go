package inject

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/tidwall/gjson"
)

// seedBodies adds every request fixture in testdata as a fuzz seed.
func seedBodies(f *testing.F, add func(body []byte)) {
	for _, glob := range []string{"testdata/requests/*.json", "testdata/collapse/*.json"} {
		files, _ := filepath.Glob(glob)
		for _, p := range files {
			if filepath.Ext(filepath.Base(p[:len(p)-5])) == ".calls" {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			add(b)
		}
	}
}

func FuzzInsert(f *testing.F) {
	seedBodies(f, func(b []byte) { f.Add(b, uint8(0), "note") })
	f.Add([]byte(`{"messages":[{"role":"tool"}]}`), uint8(1), "x")
	f.Add([]byte(`{"messages":[{"role":"user","content":[ ]}]}`), uint8(2), "")
	f.Add([]byte(`{"messages":[{"content":null,"role":"system"}]}`), uint8(3), "\x00\xff")
	placements := []Placement{Auto, Tool, User, System}
	f.Fuzz(func(t *testing.T, body []byte, p uint8, text string) {
		out, _, err := insertChat(body, placements[int(p)%len(placements)], text)
		if err != nil {
			return
		}
		if gjson.ValidBytes(body) && !json.Valid(out) {
			t.Fatalf("insertChat(%q) = %q: not valid JSON", body, out)
		}
	})
}

func FuzzCollapse(f *testing.F) {
	in, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	seedBodies(f, func(b []byte) { f.Add(b, uint8(3)) })
	f.Fuzz(func(t *testing.T, body []byte, n uint8) {
		// The loop's calls: every assistant tool call, all with one key, so
		// collapse has as much to remove as the body allows.
		var calls []inspect.CallRef
		for i, m := range gjson.GetBytes(body, "messages").Array() {
			for _, tc := range m.Get("tool_calls").Array() {
				calls = append(calls, inspect.CallRef{Message: i, ToolCallID: tc.Get("id").String(), Name: "f"})
			}
			if m.Get("function_call").Exists() {
				calls = append(calls, inspect.CallRef{Message: i, Name: "f"})
			}
		}
		if len(calls) > int(n) {
			calls = calls[:n]
		}
		out, _, err := in.Collapse(body, calls)
		if err != nil {
			return
		}
		if gjson.ValidBytes(body) {
			if !json.Valid(out) {
				t.Fatalf("Collapse(%q) = %q: not valid JSON", body, out)
			}
			_, before := pairing(body)
			if _, after := pairing(out); len(after) > len(before) {
				t.Fatalf("Collapse(%q) left results without calls: %v", body, after)
			}
		}
	})
}
