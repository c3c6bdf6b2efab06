package sse

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

// goldenEvent is an event as recorded in a golden file.
type goldenEvent struct {
	Name    *string `json:"name,omitempty"`
	Data    *string `json:"data,omitempty"`
	ID      *string `json:"id,omitempty"`
	Retry   int     `json:"retry,omitempty"`
	Error   *string `json:"error,omitempty"`
	Comment bool    `json:"comment,omitempty"`
	Blank   bool    `json:"blank,omitempty"`
	Partial bool    `json:"partial,omitempty"`
	RawLen  int     `json:"raw_len"`
}

type goldenDelta struct {
	Choice           int    `json:"choice"`
	Content          string `json:"content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`
	ToolCall         bool   `json:"tool_call,omitempty"`
	ToolCallStarted  int    `json:"tool_call_started"`
	ToolCallsStarted int    `json:"tool_calls_started,omitempty"`
	FinishReason     string `json:"finish_reason,omitempty"`
}

// goldenChat is the accumulated result of a stream.
type goldenChat struct {
	ID                string          `json:"id"`
	Model             string          `json:"model"`
	Created           int64           `json:"created"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []Choice        `json:"choices"`
	Usage             *Usage          `json:"usage,omitempty"`
	Done              bool            `json:"done"`
	ErrorRaw          json.RawMessage `json:"error_raw,omitempty"`
	AddErrors         []string        `json:"add_errors,omitempty"`
	Deltas            []goldenDelta   `json:"deltas"`
}

type golden struct {
	Events []goldenEvent `json:"events"`
	Chat   goldenChat    `json:"chat"`
}

func strp(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// runGolden reads a fixture with Reader and feeds every event's data to a
// ChatAccumulator.
func runGolden(t *testing.T, in []byte) golden {
	t.Helper()
	var g golden
	var a ChatAccumulator
	r := NewReader(bytes.NewReader(in), 0)
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		ge := goldenEvent{
			Name: strp(e.Name), Data: strp(e.Data), ID: strp(e.ID), Error: strp(e.Error),
			Comment: e.Comment, Blank: e.Blank(), Partial: e.Partial, RawLen: len(e.Raw),
		}
		if e.Retry >= 0 {
			ge.Retry = e.Retry
		}
		if ge.Data != nil && len(*ge.Data) > 1024 {
			s := (*ge.Data)[:64] + "...(truncated)"
			ge.Data = &s
		}
		g.Events = append(g.Events, ge)
		if e.Data == nil {
			continue
		}
		var ds []Update
		ds, err = a.Add(e.Data)
		for _, d := range ds {
			g.Chat.Deltas = append(g.Chat.Deltas, goldenDelta{
				Choice: d.Choice, Content: string(d.Text), Reasoning: string(d.Reasoning),
				ToolCall: d.ToolCall, ToolCallStarted: d.ToolCallStarted,
				ToolCallsStarted: d.ToolCallsStarted, FinishReason: string(d.FinishReason),
			})
		}
		if err != nil {
			g.Chat.AddErrors = append(g.Chat.AddErrors, err.Error())
		}
	}
	g.Chat.ID, g.Chat.Model, g.Chat.Created = a.ID(), a.Model(), a.Created()
	g.Chat.SystemFingerprint, g.Chat.Choices, g.Chat.Done = a.SystemFingerprint(), a.Choices(), a.Done()
	if u, ok := a.Usage(); ok {
		g.Chat.Usage = &u
	}
	g.Chat.ErrorRaw = a.ErrorRaw()
	return g
}

func TestGolden(t *testing.T) {
	for _, file := range fixtures(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".sse")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := runGolden(t, in)
			// The long-arguments stream would make a 300 KB golden file:
			// record its shape and check the arguments separately.
			for i := range got.Chat.Choices {
				for j := range got.Chat.Choices[i].ToolCalls {
					tc := &got.Chat.Choices[i].ToolCalls[j]
					if len(tc.Arguments) > 1024 {
						checkLongArguments(t, tc.Arguments)
						tc.Arguments = tc.Arguments[:64] + "...(truncated)"
					}
				}
			}
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, '\n')
			path := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("%s: got\n%s\nwant\n%s", name, b, want)
			}
		})
	}
}

// checkLongArguments asserts the 200 KB arguments survived as valid JSON.
func checkLongArguments(t *testing.T, args string) {
	t.Helper()
	var v struct{ Path, Content string }
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		t.Fatalf("long arguments are not JSON: %v", err)
	}
	if n := utf8.RuneCountInString(v.Content); v.Path != "big.go" || n != 200*1024 {
		t.Errorf("long arguments: path %q, content %d characters; want big.go, %d", v.Path, n, 200*1024)
	}
}

func TestGoldenErrorsAreUpstream(t *testing.T) {
	// Each error fixture must surface as ErrUpstream with its payload kept.
	for _, name := range []string{"vllm-error-midstream", "llamacpp-error-new", "anthropic-messages-error", "openai-responses-error"} {
		in, err := os.ReadFile(filepath.Join("testdata", name+".sse"))
		if err != nil {
			t.Fatal(err)
		}
		var a ChatAccumulator
		r := NewReader(bytes.NewReader(in), 0)
		var upstream error
		for {
			e, err := r.Next()
			if err != nil {
				break
			}
			if _, err := a.Add(e.Data); errors.Is(err, ErrUpstream) {
				upstream = err
			}
		}
		if upstream == nil || !bytes.Contains(a.ErrorRaw(), []byte(`error`)) {
			t.Errorf("%s: error %v, ErrorRaw %q; want ErrUpstream and the payload", name, upstream, a.ErrorRaw())
		}
	}
}
