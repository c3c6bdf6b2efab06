package policy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/rs/zerolog"
)

// reachCase is one loop of inspect's corpus as a session: its requests
// are the prefixes of its history, one more assistant turn each.
type reachCase struct {
	id       string
	request  map[string]json.RawMessage
	messages []json.RawMessage
}

func loadReachCases(t *testing.T) []reachCase {
	t.Helper()
	var out []reachCase
	err := filepath.WalkDir(filepath.Join("..", "inspect", "testdata", "corpus"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".jsonl") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var rec struct {
				ID      string                     `json:"id"`
				Expect  string                     `json:"expect"`
				Request map[string]json.RawMessage `json:"request"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Expect != "loop" {
				continue
			}
			var msgs []json.RawMessage
			if json.Unmarshal(rec.Request["messages"], &msgs) != nil {
				continue
			}
			out = append(out, reachCase{id: rec.ID, request: rec.Request, messages: msgs})
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// role and calls read one chat message.
func role(m json.RawMessage) (string, []string) {
	var v struct {
		Role      string `json:"role"`
		ToolCalls []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
	}
	_ = json.Unmarshal(m, &v)
	ids := make([]string, len(v.ToolCalls))
	for i, c := range v.ToolCalls {
		ids[i] = c.ID
	}
	return v.Role, ids
}

// turns splits msgs after the opening into assistant turns: each turn is
// an assistant message and what follows it up to the next one.
func turns(msgs []json.RawMessage) (opening []json.RawMessage, ts [][]json.RawMessage) {
	for i, m := range msgs {
		if r, _ := role(m); r == "assistant" {
			opening = msgs[:i]
			msgs = msgs[i:]
			break
		}
	}
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) {
			if r, _ := role(msgs[j]); r == "assistant" {
				break
			}
			j++
		}
		ts = append(ts, msgs[i:j])
		i = j
	}
	return opening, ts
}

// again is turn t once more, its call ids renamed (suffix n) so that its
// results pair with it alone.
func again(t []json.RawMessage, n string) []json.RawMessage {
	_, ids := role(t[0])
	out := make([]json.RawMessage, len(t))
	for i, m := range t {
		for _, id := range ids {
			if id != "" {
				m = bytes.ReplaceAll(m, []byte(`"`+id+`"`), []byte(`"`+id+n+`"`))
			}
		}
		out[i] = m
	}
	return out
}

// TestLadderReach plays every loop of inspect's corpus as a session that
// sends its history one assistant turn at a time and, past the recorded
// history, repeats its last turn (an agent that ignores loopguard): the
// first intervention and LOOP_DETECTED must come within a few calls of
// where the loop started (README.md, "What it detects", compares them with
// gemini-cli's and Cline's).
func TestLadderReach(t *testing.T) {
	engine, err := inspect.NewEngine(inspect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const extra = 12 // repeats of the last turn past the history
	var toFirst, toEnd []int
	type slow struct {
		id    string
		calls int
	}
	var slowest []slow
	unended := 0
	for _, c := range loadReachCases(t) {
		opening, ts := turns(c.messages)
		if len(ts) == 0 {
			continue
		}
		for i := range extra {
			ts = append(ts, again(ts[len(ts)-1], "r"+strings.Repeat("x", i+1)))
		}
		p := New(Config{}, nil, zerolog.Nop())
		start, first, end := -1, -1, -1
		calls := 0
		msgs := slices.Clone(opening)
		for _, turn := range ts {
			msgs = append(msgs, turn...)
			_, ids := role(turn[0])
			calls += max(1, len(ids))
			req := make(map[string]json.RawMessage, len(c.request))
			for key, v := range c.request {
				req[key] = v
			}
			req["messages"], _ = json.Marshal(msgs)
			body, _ := json.Marshal(req)
			traj, err := inspect.Parse(body)
			if err != nil {
				t.Fatalf("%s: %v", c.id, err)
			}
			v := engine.Inspect(traj)
			d, _ := p.Decide(context.Background(), c.id, v, traj, ModeEnforce)
			if v.Loop && start < 0 && len(v.Detections) > 0 {
				// The loop began at the first occurrence the detection names,
				// counted in calls from the opening.
				start = callsUpTo(ts, v.Detections[0].Evidence.First)
			}
			if d.Action != None && first < 0 {
				first = calls
			}
			if d.Action == Terminate {
				end = calls
				break
			}
		}
		if start < 0 {
			t.Errorf("%s: no loop seen in its history and %d repeats", c.id, extra)
			continue
		}
		toFirst = append(toFirst, first-start+1)
		if end < 0 {
			unended++
			continue
		}
		toEnd = append(toEnd, end-start+1)
		slowest = append(slowest, slow{c.id, end - start + 1})
	}
	slices.SortFunc(slowest, func(a, b slow) int { return b.calls - a.calls })
	for _, s := range slowest[:min(3, len(slowest))] {
		t.Logf("slowest to LOOP_DETECTED: %s, %d calls", s.id, s.calls)
	}
	slices.Sort(toFirst)
	slices.Sort(toEnd)
	if len(toFirst) == 0 || len(toEnd) == 0 {
		t.Fatal("no loop measured")
	}
	med := func(s []int) int { return s[len(s)/2] }
	t.Logf("%d loops: calls from the loop's start to the first intervention: median %d, worst %d; to LOOP_DETECTED: median %d, worst %d (%d not ended: no-progress evidence missing)",
		len(toFirst), med(toFirst), toFirst[len(toFirst)-1], med(toEnd), toEnd[len(toEnd)-1], unended)
	if med(toFirst) > 5 || med(toEnd) > 8 {
		t.Errorf("median calls to the first intervention %d (want <= 5), to LOOP_DETECTED %d (want <= 8)", med(toFirst), med(toEnd))
	}
}

// callsUpTo counts the calls of turns ts up to and including turn step
// (a Trajectory step is one assistant turn).
func callsUpTo(ts [][]json.RawMessage, step int) int {
	n := 0
	for i := 0; i <= step && i < len(ts); i++ {
		_, ids := role(ts[i][0])
		n += max(1, len(ids))
	}
	return n
}
