package inject

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/tidwall/gjson"
)

func newTestInjector(t testing.TB) *Injector {
	t.Helper()
	in, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func readCalls(t testing.TB, name string) []inspect.CallRef {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "collapse", name+".calls.json"))
	if err != nil {
		t.Fatal(err)
	}
	var calls []inspect.CallRef
	if err := json.Unmarshal(b, &calls); err != nil {
		t.Fatal(err)
	}
	return calls
}

// pairing lists the tool calls without a result and the tool results that
// answer no call of the assistant turn before them.
func pairing(body []byte) (unpaired, orphans []string) {
	var pending []string
	flush := func() { unpaired = append(unpaired, pending...); pending = nil }
	for _, m := range gjson.GetBytes(body, "messages").Array() {
		switch m.Get("role").String() {
		case "assistant":
			flush()
			for _, tc := range m.Get("tool_calls").Array() {
				pending = append(pending, tc.Get("id").String())
			}
			if fc := m.Get("function_call"); fc.Exists() {
				pending = append(pending, "function:"+fc.Get("name").String())
			}
		case "tool", "function":
			id := m.Get("tool_call_id").String()
			if m.Get("role").String() == "function" {
				id = "function:" + m.Get("name").String()
			}
			found := false
			for i, p := range pending {
				if p == id {
					pending = append(pending[:i], pending[i+1:]...)
					found = true
					break
				}
			}
			if !found {
				orphans = append(orphans, id)
			}
		default:
			flush()
		}
	}
	flush()
	return unpaired, orphans
}

func TestCollapse(t *testing.T) {
	tests := []struct {
		name         string
		wantTurns    int
		wantMessages int
		wantNotes    map[int]string // output message index -> note it ends with
	}{
		{"repetition", 3, 6, map[int]string{3: "repeated 4 times"}},
		{"cycle", 4, 8, map[int]string{2: "repeated 3 times", 4: "repeated 3 times"}},
		{"mixed-parallel", 1, 2, map[int]string{2: "repeated 3 times"}},
		{"users-between", 0, 0, nil},
		{"legacy", 2, 4, map[int]string{2: "repeated 3 times"}},
		{"stale-refs", 0, 0, nil},
		{"reused-ids", 2, 4, map[int]string{2: "repeated 3 times"}},
		{"missing-result", 1, 2, map[int]string{2: "repeated 3 times"}},
		{"parts-results", 2, 4, map[int]string{2: "repeated 3 times"}},
	}
	in := newTestInjector(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "collapse", tt.name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			orig := bytes.Clone(body)
			out, c, err := in.Collapse(body, readCalls(t, tt.name))
			if err != nil {
				t.Fatalf("Collapse: %v", err)
			}
			if !bytes.Equal(body, orig) {
				t.Fatal("Collapse modified its input")
			}
			if c.Turns != tt.wantTurns || c.Messages != tt.wantMessages {
				t.Errorf("Collapse removed %d turns, %d messages; want %d, %d", c.Turns, c.Messages, tt.wantTurns, tt.wantMessages)
			}
			if c.Saved != len(body)-len(out) {
				t.Errorf("Saved = %d; want %d", c.Saved, len(body)-len(out))
			}
			if tt.wantTurns == 0 && !bytes.Equal(out, body) {
				t.Errorf("Collapse changed a body it could not collapse:\n%s", out)
			}
			if !gjson.ValidBytes(out) {
				t.Fatalf("output is not valid JSON:\n%s", out)
			}
			// Every call that had a result still has one; no result lost its call.
			wantUnpaired, _ := pairing(body)
			gotUnpaired, orphans := pairing(out)
			if len(orphans) > 0 {
				t.Errorf("tool results without their call: %v", orphans)
			}
			if strings.Join(gotUnpaired, ",") != strings.Join(wantUnpaired, ",") {
				t.Errorf("unpaired calls = %v; want %v (as in the input)", gotUnpaired, wantUnpaired)
			}
			checkTemplateSafe(t, out)
			// Kept messages are the input's bytes; noted ones only gain the note.
			origRaw := map[string]bool{}
			for _, m := range gjson.GetBytes(body, "messages").Array() {
				origRaw[m.Raw] = true
			}
			for i, m := range gjson.GetBytes(out, "messages").Array() {
				note, noted := tt.wantNotes[i]
				if !noted {
					if !origRaw[m.Raw] {
						t.Errorf("message %d is not byte-identical to an input message: %s", i, m.Raw)
					}
					continue
				}
				if got := messageText(m); !strings.Contains(got, Marker+" this call was "+note) {
					t.Errorf("message %d text = %q; want the note %q", i, got, note)
				}
			}
			golden(t, filepath.Join("collapse", "golden", tt.name+".json"), out)
		})
	}
}

func TestCollapseKeepsOtherFields(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"r"},{"role":"assistant","tool_calls":[{"id":"b","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"b","content":"r"}],"tools":[],"x":{"y":"\u00e9"}}`)
	calls := []inspect.CallRef{{Message: 0, ToolCallID: "a", Name: "f", Args: "{}"}, {Message: 2, ToolCallID: "b", Name: "f", Args: "{}"}}
	out, _, err := newTestInjector(t).Collapse(body, calls)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"r\n\n[loopguard] this call was repeated 2 times with the same result; the repeats were removed"}],"tools":[],"x":{"y":"\u00e9"}}`
	if string(out) != want {
		t.Errorf("Collapse =\n%s\nwant\n%s", out, want)
	}
}

func TestCollapseErrors(t *testing.T) {
	in := newTestInjector(t)
	if _, _, err := in.Collapse([]byte(`{"model":"m"}`), []inspect.CallRef{{}}); err != ErrNoMessages {
		t.Errorf("Collapse without messages: error = %v; want %v", err, ErrNoMessages)
	}
	body := []byte(`{"messages":[]}`)
	out, c, err := in.Collapse(body, nil)
	if err != nil || !bytes.Equal(out, body) || c != (Collapsed{}) {
		t.Errorf("Collapse with no calls = %s, %+v, %v; want the body unchanged", out, c, err)
	}
}
