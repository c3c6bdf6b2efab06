package agentrun

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/observe"
)

func TestSummaryFromRecord(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "looping.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d sessionDetail
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	sum := Summary{Session: "run-1", ExitCode: 3, Timeline: "cat /tmp/loopguard-run-1.timeline.json"}
	fill(&sum, &d)
	var out strings.Builder
	sum.Print(&out)
	want, err := os.ReadFile(filepath.Join("testdata", "looping.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Fatalf("Print =\n%s\nwant\n%s", out.String(), want)
	}

	// A run that went on after its loop was not ended by LOOP_DETECTED.
	d.Timeline = append(d.Timeline, observe.Entry{Kind: observe.KindRequest, Steps: 6})
	sum = Summary{}
	fill(&sum, &d)
	if sum.LoopDetected || len(sum.Loops) != 4 {
		t.Fatalf("after a later plain request: LoopDetected %v, %d loops; want false, 4", sum.LoopDetected, len(sum.Loops))
	}
}
