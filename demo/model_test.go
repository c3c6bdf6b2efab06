package demo

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/fakellm"
)

func readModelFixture(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "model", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestRespond checks the scripted model's decisions, one history per
// fixture: the listener must react to loopguard's texts, the stubborn model
// must not.
func TestRespond(t *testing.T) {
	tests := []struct {
		name        string
		give        string // fixture in testdata/model
		wantTool    string // "name arguments" of the one call, "" for none
		wantContent string // substring of the content ("" checks nothing)
		wantStatus  int
	}{
		{name: "stubborn ignores a warning", give: "stubborn_ignores_warning.json",
			wantTool: `bash {"command":"make build"}`},
		{name: "stubborn without bash repeats the first tool", give: "stubborn_other_tool.json",
			wantTool: `search {"query":"demo","limit":1}`},
		{name: "listener starts with the build", give: "listener_first_turn.json",
			wantTool: `bash {"command":"make build"}`},
		{name: "listener retries a failed build without a notice", give: "listener_failed_build.json",
			wantTool: `bash {"command":"make build"}`},
		{name: "listener reads the Makefile after a warning", give: "listener_warned.json",
			wantTool: `bash {"command":"cat Makefile"}`},
		{name: "listener sees a recovery block in content parts", give: "listener_recovery_parts.json",
			wantTool: `bash {"command":"cat Makefile"}`},
		{name: "listener keeps its plan despite a later notice", give: "listener_read_makefile.json",
			wantTool: `bash {"command":"make all"}`},
		{name: "listener finishes after the build", give: "listener_built.json",
			wantContent: finalAnswer},
		{name: "rambler degenerates", give: "rambler.json",
			wantContent: strings.Repeat(ramblerSentence, 3)},
		{name: "rambler answers briefly once told", give: "rambler_told.json",
			wantContent: ramblerRecovered},
		{name: "plain model answers text", give: "plain_text.json",
			wantContent: "scripted demo model"},
		{name: "plain model calls an offered tool", give: "plain_tool_offered.json",
			wantTool: `bash {"command":"demo"}`},
		{name: "plain model sums up a tool result", give: "plain_tool_answered.json",
			wantContent: "The tool answered"},
		{name: "invalid JSON is a 400", give: "invalid_json.json", wantStatus: 400},
		{name: "odd shapes get a text answer", give: "odd_shapes.json", wantContent: "scripted demo model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := respond(&fakellm.Request{Body: readModelFixture(t, tt.give)})
			if got.Status != tt.wantStatus {
				t.Fatalf("respond(%s).Status = %d; want %d", tt.give, got.Status, tt.wantStatus)
			}
			tool := ""
			if len(got.ToolCalls) > 1 {
				t.Fatalf("respond(%s) made %d tool calls; want at most 1", tt.give, len(got.ToolCalls))
			}
			if len(got.ToolCalls) == 1 {
				c := got.ToolCalls[0]
				if !json.Valid([]byte(c.Arguments)) {
					t.Errorf("respond(%s) arguments %q are not JSON", tt.give, c.Arguments)
				}
				tool = c.Name + " " + c.Arguments
			}
			if tool != tt.wantTool {
				t.Errorf("respond(%s) tool call = %q; want %q", tt.give, tool, tt.wantTool)
			}
			if !strings.Contains(got.Content, tt.wantContent) {
				t.Errorf("respond(%s).Content = %q; want it to contain %q", tt.give, got.Content, tt.wantContent)
			}
		})
	}
}

// TestRunTool checks the canned tool results the scenarios rely on.
func TestRunTool(t *testing.T) {
	tests := []struct {
		name     string
		give     [2]string // tool name, arguments
		wantExit int
		wantOut  string
	}{
		{"build fails", [2]string{"bash", `{"command":"make build"}`}, 2, "No rule to make target 'build'"},
		{"makefile", [2]string{"bash", `{"command":"cat Makefile"}`}, 0, "all:"},
		{"make all", [2]string{"bash", `{"command":" make all "}`}, 0, "go build"},
		{"unknown command", [2]string{"bash", `{"command":"rm -rf /"}`}, 127, "command not found"},
		{"bad arguments", [2]string{"bash", `{"command":`}, 2, "invalid arguments"},
		{"unknown tool", [2]string{"python", `{}`}, 127, "no such tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, exit := runTool(tt.give[0], tt.give[1])
			if exit != tt.wantExit || !strings.Contains(out, tt.wantOut) {
				t.Errorf("runTool(%q, %q) = %q, %d; want %q, %d", tt.give[0], tt.give[1], out, exit, tt.wantOut, tt.wantExit)
			}
		})
	}
	// The loop depends on it: the same failure, byte for byte, every time.
	a, _ := runTool("bash", `{"command":"make build"}`)
	b, _ := runTool("bash", `{"command":"make build"}`)
	if a != b {
		t.Errorf("make build results differ: %q vs %q", a, b)
	}
}

// FuzzRespond: the model answers arbitrary clients in Serve mode and must
// never panic, and its tool arguments must always be JSON.
func FuzzRespond(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "model"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		f.Add(readModelFixture(f, e.Name()))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := respond(&fakellm.Request{Body: body})
		for _, c := range got.ToolCalls {
			if !json.Valid([]byte(c.Arguments)) {
				t.Fatalf("respond(%q) arguments %q are not JSON", body, c.Arguments)
			}
		}
	})
}
