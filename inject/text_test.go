package inject

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/loopguard/loopguard/inspect"
)

func readVerdict(t testing.TB, name string) inspect.Verdict {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "verdicts", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var v inspect.Verdict
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// goldenText compares a rendered text with its golden file. The texts quote
// inspect's Verdict.Brief and Summary, so a change of their wording there
// shows up here; regenerate with -update after reading the diff.
func goldenText(t *testing.T, name, got string) {
	t.Helper()
	golden(t, filepath.Join("texts", name), []byte(got))
}

// constrainShape is the <loop-recovery> block of docs/design.md section 4, line
// by line.
var constrainShape = regexp.MustCompile(`\A<loop-recovery reset="\d+" urgency="(warning|critical)">
Loop detected: [a-z_]+ — [^\n]+
Pattern: [^\n]+(   Arguments: [^\n]+)?   Count: \d+ \(threshold \d+\)
((Unchanged result|Repeated error): [^\n]+
)?Constraints:
(- [^\n]+
)+Suggestions:
(- [^\n]+
)+(Approaches that already failed in this session:
(- [^\n]+
)+)?(\(This loop is also seen across \d+ other sessions\.\)
)?</loop-recovery>\z`)

func TestConstraint(t *testing.T) {
	tests := []struct {
		name string
		give Loop
		want []string // substrings the block must hold
	}{
		{"tool_repetition", Loop{Reset: 3, Failed: []string{"git status repeated", "git diff"}},
			[]string{`reset="3" urgency="warning"`, "Loop detected: tool_repetition — ", "   Arguments: {\"command\":\"git status\"}   Count: 4 (threshold 3)",
				"Unchanged result: On branch main nothing to commit, working tree clean", "- Do not call `bash` with `{\"command\":\"git status\"}` again.",
				"Approaches that already failed in this session:\n- git status repeated\n- git diff\n"}},
		{"error_cycle", Loop{Urgency: Critical, OtherSessions: 4},
			[]string{`urgency="critical"`, "Repeated error: ModuleNotFoundError: No module named 'foo'", "before making a substantially different change",
				"Read the error message", "(This loop is also seen across 4 other sessions.)"}},
		{"output_repetition", Loop{},
			[]string{"Do not repeat your previous answer"}},
		{"huge_args", Loop{},
			[]string{"Do not call `write_file` with", "…"}},
	}
	in := newTestInjector(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.give.Verdict = readVerdict(t, tt.name)
			got, err := in.Constraint(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if !constrainShape.MatchString(got) {
				t.Errorf("Constraint() does not have the <loop-recovery> shape:\n%s", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Constraint() =\n%s\nwant it to contain %q", got, w)
				}
			}
			if len(got) > DefaultMaxTextBytes || !utf8.ValidString(got) {
				t.Errorf("Constraint() is %d bytes (valid UTF-8: %v); want at most %d", len(got), utf8.ValidString(got), DefaultMaxTextBytes)
			}
			goldenText(t, "constrain."+tt.name+".txt", got)
		})
	}
}

func TestWarning(t *testing.T) {
	tests := []struct {
		name string
		want []string
	}{
		{"tool_repetition", []string{Marker + " Possible loop: tool_repetition fired on bash(git status) x4", "(count 4, threshold 3)", "The result did not change: \"On branch main"}},
		{"error_cycle", []string{"The same error came back each time: \"ModuleNotFoundError"}},
		{"output_repetition", []string{"(count 3, threshold 2)"}},
	}
	in := newTestInjector(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := in.Warning(Loop{Verdict: readVerdict(t, tt.name)})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(got, Marker) {
				t.Errorf("Warning() = %q; want it to start with %q", got, Marker)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Warning() = %q; want it to contain %q", got, w)
				}
			}
			goldenText(t, "warn."+tt.name+".txt", got)
		})
	}
}

func TestDegenerated(t *testing.T) {
	in := newTestInjector(t)
	got, err := in.Degenerated(Degeneration{Snippet: strings.Repeat("the the ", 200)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, Marker) || !strings.Contains(got, "(token_degeneration)") || !strings.Contains(got, "at: the the") {
		t.Errorf("Degenerated() = %q", got)
	}
	if len(got) > 600 {
		t.Errorf("Degenerated() is %d bytes; the snippet was not shortened", len(got))
	}
	goldenText(t, "degenerated.txt", got)
}

func TestCustomTemplates(t *testing.T) {
	cfg := Config{
		WarnTemplate: `{{.Rule}}|{{.Tool}}|{{.Count}}/{{.Threshold}}|{{range .Attempts}}{{.}};{{end}}`,
		Suggestions:  map[string][]string{"tool_repetition": {"Ask the user."}},
	}
	in, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := readVerdict(t, "tool_repetition")
	got, err := in.Warning(Loop{Verdict: v})
	if err != nil {
		t.Fatal(err)
	}
	if want := "tool_repetition|bash|4/3|`bash` with `{\"command\":\"git status\"}` ×4;"; got != want {
		t.Errorf("Warning() = %q; want %q", got, want)
	}
	block, err := in.Constraint(Loop{Verdict: v})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(block, "Suggestions:\n- Ask the user.\n") {
		t.Errorf("Constraint() ignored the configured suggestions:\n%s", block)
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		give string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"  multi\n\n line\tresult  ", 100, "multi line result"},
		{"abcdefghij", 8, "abcde…"},
		{"üüüüü", 7, "üü…"},
		{"bad\xff\x00byte", 20, "bad byte"},
	}
	for _, tt := range tests {
		if got := clip(tt.give, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q; want %q", tt.give, tt.n, got, tt.want)
		}
		if len(clip(tt.give, tt.n)) > tt.n {
			t.Errorf("clip(%q, %d) is longer than %d", tt.give, tt.n, tt.n)
		}
	}
}

func TestLimitKeepsClosingLine(t *testing.T) {
	s := "<loop-recovery>\n" + strings.Repeat("- line\n", 200) + "</loop-recovery>"
	got := limit(s, 512)
	if len(got) > 512 || !strings.HasSuffix(got, "\n</loop-recovery>") {
		t.Errorf("limit() = %d bytes ending %q", len(got), got[len(got)-20:])
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		give Config
		want string // substring of the error; "" means valid
	}{
		{"zero", Config{}, ""},
		{"defaults", DefaultConfig(), ""},
		{"placement", Config{Placement: "middle"}, "placement"},
		{"override pattern", Config{Overrides: []Override{{Model: "[", Placement: User}}}, "overrides[0]"},
		{"override placement", Config{Overrides: []Override{{Model: "a*", Placement: "x"}}}, "overrides[0]: placement"},
		{"template syntax", Config{WarnTemplate: "{{.Rule"}, "warn_template"},
		{"template field", Config{ConstrainTemplate: "{{.NoSuchField}}"}, "NoSuchField"},
		{"terminate prefix", Config{TerminateTemplate: "stopped"}, "LOOP_DETECTED:"},
		{"retried 429", Config{ErrorStatus: 429}, "error_status"},
		{"retried 409", Config{ErrorStatus: 409}, "error_status"},
		{"retried 503", Config{ErrorStatus: 503}, "error_status"},
		{"not an error", Config{ErrorStatus: 200}, "error_status"},
		{"400 ok", Config{ErrorStatus: 400}, ""},
		{"terminate_as", Config{TerminateAs: "panic"}, "terminate_as"},
		{"max text", Config{MaxTextBytes: 100}, "max_text_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v; want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v; want an error about %q", err, tt.want)
			}
		})
	}
	// Every problem is reported at once.
	err := Config{Placement: "x", ErrorStatus: 500}.Validate()
	if err == nil || !strings.Contains(err.Error(), "placement") || !strings.Contains(err.Error(), "error_status") {
		t.Errorf("Validate() = %v; want both problems", err)
	}
}

func TestPlacementOverrides(t *testing.T) {
	in, err := New(Config{Placement: Tool, Overrides: []Override{
		{Model: "mistral*", Placement: User},
		{Model: "*/Llama-3*", Placement: System},
		{Model: "mistral-large", Placement: System}, // shadowed by the first
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give string
		want Placement
	}{
		{"mistral-large", User},
		{"meta-llama/Llama-3.1-8B", System},
		{"gpt-4.1", Tool},
		{"", Tool},
	}
	for _, tt := range tests {
		if got := in.Placement(tt.give); got != tt.want {
			t.Errorf("Placement(%q) = %s; want %s", tt.give, got, tt.want)
		}
	}
}
