package inspect

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// outcome is what one detector family must make of a history.
type outcome int

const (
	// absent: the family reports nothing; other families may.
	absent outcome = iota
	// silent: the family reports nothing and no family calls it a loop.
	silent
	// healthy: no family calls it a loop; the family may report below a
	// loop (a help to other rules).
	healthy
	// reported: the family reports, and no family calls it a loop.
	reported
	// warned: a loop the family is among, confidence at most Single.
	warned
	// stopped: a loop the family is among, confidence above Single, and
	// the family's own score above Single too.
	stopped
)

func (o outcome) String() string {
	return [...]string{"absent", "silent", "healthy", "reported", "warned", "stopped"}[o]
}

// familyCase is one row of a detector family's table test: a history, the
// thresholds it runs under and what the family must make of it.
type familyCase struct {
	name string
	// The history is one of: a build script, a conversation, or a request
	// body under testdata/ (a chat-completions JSON message history).
	give    []string
	history func() *conv
	fixture string
	cfg     func(*Config) // changes to DefaultConfig; nil keeps it
	want    outcome
}

// body returns the case's request body.
func (tt *familyCase) body(t *testing.T) []byte {
	t.Helper()
	switch {
	case tt.fixture != "":
		b, err := os.ReadFile(filepath.Join("testdata", tt.fixture))
		if err != nil {
			t.Fatal(err)
		}
		return b
	case tt.history != nil:
		b, err := json.Marshal(tt.history().request("test-model"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return build(tt.give...)
}

// runFamily runs each case through an engine with its thresholds and
// checks what the family cat made of it. Every loop's evidence must be
// complete, and only no-progress evidence may score above Single.
func runFamily(t *testing.T, cat Category, tests []familyCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			e, err := NewEngine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			v := e.Inspect(mustParse(t, tt.body(t)))
			var own *Detection
			for i := range v.Detections {
				if v.Detections[i].Category == cat {
					own = &v.Detections[i]
				}
			}
			switch tt.want {
			case absent, silent:
				if own != nil {
					t.Fatalf("Inspect = %v; want no %s detection", v.Detections, cat)
				}
			case reported:
				if own == nil {
					t.Fatalf("Inspect = %v; want a %s detection", v.Detections, cat)
				}
			}
			if tt.want == silent || tt.want == healthy || tt.want == reported {
				if v.Loop {
					t.Fatalf("Inspect = %s (%v); want no loop", v.Summary(), v.Detections)
				}
				return
			}
			if tt.want == absent {
				return
			}
			if !v.Loop || own == nil {
				t.Fatalf("Inspect = loop %v %v; want %s", v.Loop, v.Detections, cat)
			}
			if strong := v.Confidence > cfg.Single; strong != (tt.want == stopped) {
				t.Errorf("Confidence = %.2f; want %s", v.Confidence, tt.want)
			}
			if tt.want == stopped && own.Score <= cfg.Single {
				t.Errorf("%s scored %.2f; want above %.2f", cat, own.Score, cfg.Single)
			}
			for _, d := range v.Detections {
				if d.Score > cfg.Single && !d.Evidence.NoProgress && d.Category != OutputRepetition {
					t.Errorf("%s scored %.2f without no-progress evidence", d.Category, d.Score)
				}
				if d.Evidence.Count == 0 || len(d.Evidence.Steps) == 0 || d.Evidence.First > d.Evidence.Last {
					t.Errorf("%s evidence incomplete: %+v", d.Category, d.Evidence)
				}
			}
		})
	}
}
