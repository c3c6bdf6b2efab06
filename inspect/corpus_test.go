package inspect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// corpusCase is one record in replay's format.
type corpusCase struct {
	ID      string          `json:"id"`
	Expect  string          `json:"expect"`
	Family  string          `json:"family"`
	Request json.RawMessage `json:"request"`
	file    string
}

// loadCorpus reads every *.jsonl (one record a line) and *.json (one
// record) under testdata/corpus.
func loadCorpus(t testing.TB) []corpusCase {
	t.Helper()
	var out []corpusCase
	err := filepath.WalkDir("testdata/corpus", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(p, ".jsonl"):
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(make([]byte, 1<<20), 64<<20)
			for sc.Scan() {
				line := bytes.TrimSpace(sc.Bytes())
				if len(line) == 0 {
					continue
				}
				var c corpusCase
				if err := json.Unmarshal(line, &c); err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				c.file = p
				out = append(out, c)
			}
			return sc.Err()
		case strings.HasSuffix(p, ".json"):
			var c corpusCase
			if err := json.Unmarshal(data, &c); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			c.file = p
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCorpus runs every hand-built and real case through Parse and the
// default engine: each must get its expected verdict, and each loop its
// expected category (the family).
func TestCorpus(t *testing.T) {
	cases := loadCorpus(t)
	if len(cases) < 60 {
		t.Errorf("corpus has %d cases; want >= 60", len(cases))
	}
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var tp, fn, fp, tn int
	families := map[string][2]int{}
	for _, c := range cases {
		tr, err := Parse(c.Request)
		if err != nil {
			t.Errorf("%s: Parse: %v", c.ID, err)
			continue
		}
		v := e.Inspect(tr)
		f := families[c.Family]
		switch {
		case c.Expect == "loop" && v.Loop:
			tp++
			f[0]++
		case c.Expect == "loop":
			fn++
			t.Errorf("MISS %s (%s, family %s): got %v", c.ID, c.file, c.Family, v.Detections)
		case v.Loop:
			fp++
			t.Errorf("FALSE POSITIVE %s (%s, family %s): %s | %v", c.ID, c.file, c.Family, v.Summary(), v.Detections)
		default:
			tn++
			f[1]++
		}
		// A loop caught under the wrong name misleads the agent and the
		// operator (the injected text and the header name the rule).
		if c.Expect == "loop" && v.Loop && string(v.Category) != c.Family {
			t.Errorf("%s (%s): category %s; want %s (detections %v)", c.ID, c.file, v.Category, c.Family, v.Detections)
		}
		families[c.Family] = f
	}
	recall := float64(tp) / float64(max(1, tp+fn))
	fpr := float64(fp) / float64(max(1, fp+tn))
	t.Logf("confusion: TP=%d FN=%d FP=%d TN=%d recall=%.3f fp_rate=%.3f", tp, fn, fp, tn, recall, fpr)
	names := make([]string, 0, len(families))
	for k := range families {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.Logf("  family %-22s loop-hits=%d healthy-ok=%d", k, families[k][0], families[k][1])
	}
}

func hasCategory(v Verdict, fam string) bool {
	for _, d := range v.Detections {
		if string(d.Category) == fam {
			return true
		}
	}
	return false
}
