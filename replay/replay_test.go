package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/proxy"
	"github.com/tidwall/gjson"
)

// corpusFiles are the labelled cases of inspect's corpus: history loops,
// healthy sessions, real healthy trajectories and streamed answers.
func corpusFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{
		"../inspect/testdata/corpus/*.jsonl",
		"../inspect/testdata/corpus/healthy/*.json",
		"../inspect/testdata/stream/cases.jsonl",
	} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("corpus not found: %v", files)
	}
	return files
}

func TestCorpusThroughReplay(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(proxy.DefaultConfig(), corpusFiles(t), &out, &errOut); code != 0 {
		t.Fatalf("Main = %d; want 0 (stderr %s)", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var sum struct{ Summary Summary }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Summary.Labelled == 0 {
		t.Fatalf("last line %q is not a summary: %v", lines[len(lines)-1], err)
	}
	s := sum.Summary
	t.Logf("corpus: %d records, tp=%d fp=%d tn=%d fn=%d precision=%.3f recall=%.3f fpr=%.3f",
		s.Labelled, s.TruePositives, s.FalsePositives, s.TrueNegatives, s.FalseNegatives, s.Precision, s.Recall, s.FalsePositiveRate)
	if s.Labelled < 60 {
		t.Errorf("only %d labelled records; the corpus must hold at least 60", s.Labelled)
	}
	for _, l := range lines[:len(lines)-1] {
		var r Result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("bad result line %q: %v", l, err)
		}
		if r.Error != "" {
			t.Errorf("%s: %s", r.ID, r.Error)
		}
		if (r.Expect == "loop") != r.Loop {
			t.Logf("miss: %s expect=%s got loop=%v category=%s", r.ID, r.Expect, r.Loop, r.Category)
		}
	}
	if s.Recall < 0.95 || s.FalsePositiveRate > 0.02 {
		t.Errorf("recall %.3f (want >= 0.95), false-positive rate %.3f (want <= 0.02)", s.Recall, s.FalsePositiveRate)
	}
}

// history is a chat request whose agent ran `make build` n times with the
// same failure.
func history(n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":"build it"}`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","tool_calls":[{"id":"c%d","type":"function","function":{"name":"bash","arguments":"{\"command\":\"make build\"}"}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"c%d","content":"make: *** No rule to make target 'build'.  Stop."}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func TestSessionRecordsEscalateInOrder(t *testing.T) {
	var in bytes.Buffer
	for n := 1; n <= 5; n++ {
		fmt.Fprintf(&in, `{"id":"turn%d","session":"s1","request":%s}`+"\n", n, history(n))
	}
	path := filepath.Join(t.TempDir(), "session.jsonl")
	if err := os.WriteFile(path, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := Main(proxy.DefaultConfig(), []string{path}, &out, &out); code != 0 {
		t.Fatalf("Main = %d: %s", code, out.String())
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got = append(got, gjson.Get(l, "action").String())
	}
	want := []string{"none", "none", "warn", "constrain", "terminate"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("actions = %v; want %v", got, want)
	}
}

func TestUnreadableInput(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string
	}{
		{"not json", "hello\n"},
		{"request not an object", `{"id":"x","request":"nope"}`},
		{"bad expect", `{"id":"x","expect":"maybe","request":{"messages":[]}}`},
		{"second line broken", `{"id":"a","request":{"messages":[]}}` + "\n{broken\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			os.WriteFile(path, []byte(tt.content), 0o644)
			var out, errOut bytes.Buffer
			code := Main(proxy.DefaultConfig(), []string{path}, &out, &errOut)
			if code == 0 || gjson.Get(errOut.String(), "error.code").String() != "unreadable_input" {
				t.Errorf("Main = %d, stderr %q; want non-zero and an OpenAI-shaped unreadable_input error", code, errOut.String())
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := Main(proxy.DefaultConfig(), []string{filepath.Join(dir, "missing")}, &out, &errOut); code == 0 {
		t.Errorf("Main on a missing file = 0; want non-zero")
	}
}

func TestReadRecordsShapes(t *testing.T) {
	obj := `{"id":"a","request":{"messages":[]}}`
	tests := []struct {
		name, give string
		want       int
	}{
		{"single object", obj, 1},
		{"pretty object", "{\n  \"id\": \"a\",\n  \"request\": {\"messages\": []}\n}", 1},
		{"array", "[" + obj + "," + obj + "]", 2},
		{"jsonl", obj + "\n\n" + obj + "\n", 2},
		{"empty", "  \n", 0},
	}
	for _, tt := range tests {
		recs, err := ReadRecords(strings.NewReader(tt.give))
		if err != nil || len(recs) != tt.want {
			t.Errorf("%s: ReadRecords = %d records, %v; want %d", tt.name, len(recs), err, tt.want)
		}
	}
}
