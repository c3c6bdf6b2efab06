package sse

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"
)

// streamAcc is what the Responses and Anthropic accumulators share.
type streamAcc interface {
	Add([]byte) (Update, error)
	ToolCallBytes(int) ([]byte, []byte, bool)
	ToolCalls() []ToolCall
	Text() string
	ID() string
	Model() string
	Done() bool
	ErrorRaw() []byte
	Usage() (Usage, bool)
}

var (
	_ streamAcc = (*ResponsesAccumulator)(nil)
	_ streamAcc = (*AnthropicAccumulator)(nil)
)

// folded is the outcome of feeding a fixture to an accumulator.
type folded struct {
	text, reasoning string
	done            []int // ToolCallDone of each update that had one
	started         []int // ToolCallStarted of each update that had one
	doneEvents      int
	errs            []error
}

func fold(t *testing.T, file string, a streamAcc) folded {
	t.Helper()
	in, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var f folded
	r := NewReader(bytes.NewReader(in), 0)
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Data == nil {
			continue
		}
		u, err := a.Add(e.Data)
		{
			f.text += string(u.Text)
			f.reasoning += string(u.Reasoning)
			if u.ToolCallStarted >= 0 {
				f.started = append(f.started, u.ToolCallStarted)
			}
			if u.ToolCallDone >= 0 {
				f.done = append(f.done, u.ToolCallDone)
				name, args, ok := a.ToolCallBytes(u.ToolCallDone)
				if !ok || len(name) == 0 || !gjson.ValidBytes(args) {
					t.Errorf("call %d done with name %q args %q ok %v", u.ToolCallDone, name, args, ok)
				}
			}
			if u.Done {
				f.doneEvents++
			}
		}
		if err != nil {
			f.errs = append(f.errs, err)
		}
	}
	return f
}

func TestResponsesAccumulator(t *testing.T) {
	tests := []struct {
		file          string
		wantID        string
		wantModel     string
		wantText      string
		wantReasoning string
		wantCalls     []ToolCall
		wantDone      []int
		wantStarted   []int // output_index of each call as it starts
		wantFinished  bool
		wantErr       error
		wantUsage     Usage
		wantSeq       int
	}{
		{
			file: "function-call.sse", wantID: "resp_lg01", wantModel: "gpt-4.1-2025-04-14",
			wantCalls: []ToolCall{{Index: 0, ID: "call_lgR1", Type: "function_call", Name: "read_file", Arguments: `{"path":"src/main.go"}`}},
			wantDone:  []int{0}, wantStarted: []int{0},
			wantFinished: true, wantUsage: Usage{88, 19, 107}, wantSeq: 7,
		},
		{
			file: "reasoning-text-two-calls.sse", wantID: "resp_lg03", wantModel: "gpt-5-2025-08-07",
			wantText: "Reading \"a.go\" and b.go\né", wantReasoning: "**Plan** read both files",
			wantCalls: []ToolCall{
				{Index: 2, ID: "call_a", Type: "function_call", Name: "read_file", Arguments: `{"path": "a.go"}`},
				{Index: 3, ID: "call_b", Type: "function_call", Name: "read_file", Arguments: `{"path": "b.go"}`},
			},
			wantDone: []int{0, 1}, wantStarted: []int{2, 3},
			wantFinished: true, wantUsage: Usage{120, 64, 184}, wantSeq: 24,
		},
		{file: "error.sse", wantID: "resp_lg02", wantErr: ErrUpstream, wantSeq: 1},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var a ResponsesAccumulator
			f := fold(t, filepath.Join("testdata/responses", tt.file), &a)
			if a.ID() != tt.wantID || a.Model() != tt.wantModel {
				t.Errorf("ID, Model = %q, %q; want %q, %q", a.ID(), a.Model(), tt.wantID, tt.wantModel)
			}
			if f.text != tt.wantText || a.Text() != tt.wantText {
				t.Errorf("text = %q (Text %q); want %q", f.text, a.Text(), tt.wantText)
			}
			if f.reasoning != tt.wantReasoning {
				t.Errorf("reasoning = %q; want %q", f.reasoning, tt.wantReasoning)
			}
			if got := a.ToolCalls(); !reflect.DeepEqual(got, tt.wantCalls) {
				t.Errorf("ToolCalls = %+v; want %+v", got, tt.wantCalls)
			}
			if !reflect.DeepEqual(f.done, tt.wantDone) || !reflect.DeepEqual(f.started, tt.wantStarted) {
				t.Errorf("ToolCallDone, ToolCallStarted updates = %v, %v; want %v, %v", f.done, f.started, tt.wantDone, tt.wantStarted)
			}
			if a.Done() != tt.wantFinished || (f.doneEvents == 1) != tt.wantFinished {
				t.Errorf("Done = %v after %d done updates; want %v", a.Done(), f.doneEvents, tt.wantFinished)
			}
			if a.Sequence() != tt.wantSeq {
				t.Errorf("Sequence = %d; want %d", a.Sequence(), tt.wantSeq)
			}
			if u, _ := a.Usage(); u != tt.wantUsage {
				t.Errorf("Usage = %+v; want %+v", u, tt.wantUsage)
			}
			if tt.wantErr == nil && len(f.errs) > 0 || tt.wantErr != nil && (len(f.errs) != 1 || !errors.Is(f.errs[0], tt.wantErr)) {
				t.Errorf("errors = %v; want %v", f.errs, tt.wantErr)
			}
			if tt.wantErr != nil && gjson.GetBytes(a.ErrorRaw(), "code").String() != "server_error" {
				t.Errorf("ErrorRaw = %s", a.ErrorRaw())
			}
		})
	}
}

// TestResponsesOutputAfterCut checks what a cut tail carries: the items
// completed so far as sent, the open message with its text, no open call.
func TestResponsesOutputAfterCut(t *testing.T) {
	in, err := os.ReadFile("testdata/responses/reasoning-text-two-calls.sse")
	if err != nil {
		t.Fatal(err)
	}
	var a ResponsesAccumulator
	r := NewReader(bytes.NewReader(in), 0)
	// Stop after the second text delta: the message is open.
	deltas := 0
	for deltas < 2 {
		e, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = a.Add(e.Data)
		if bytes.Contains(e.Name, []byte("output_text.delta")) {
			deltas++
		}
	}
	idx, id, text, ok := a.OpenMessage()
	if !ok || idx != 1 || string(id) != "msg_1" || string(text) != `Reading "a.go" and ` {
		t.Fatalf("OpenMessage = %d, %q, %q, %v", idx, id, text, ok)
	}
	out := a.AppendOutput(nil)
	if !gjson.ValidBytes(out) {
		t.Fatalf("AppendOutput = %s: invalid JSON", out)
	}
	got := gjson.ParseBytes(out)
	if n := len(got.Array()); n != 2 {
		t.Fatalf("AppendOutput has %d items; want 2: %s", n, out)
	}
	if got.Get("0.type").String() != "reasoning" || got.Get("1.status").String() != "incomplete" ||
		got.Get("1.content.0.text").String() != `Reading "a.go" and ` {
		t.Errorf("AppendOutput = %s", out)
	}
	if a.NextOutputIndex() != 2 {
		t.Errorf("NextOutputIndex = %d; want 2", a.NextOutputIndex())
	}
	if before := gjson.ParseBytes(a.AppendOutputBefore(nil, 1)); len(before.Array()) != 1 || before.Get("0.type").String() != "reasoning" {
		t.Errorf("AppendOutputBefore(1) = %s; want the reasoning item only", before.Raw)
	}

	// Text held back from the client at a cut (tail = "trim") is dropped
	// from what the tail reports; dropping more than there is empties it.
	for _, tt := range []struct {
		drop int
		want string
	}{{4, `Reading "a.go" `}, {100, ""}} {
		a.DropText(tt.drop)
		if _, _, text, _ := a.OpenMessage(); string(text) != tt.want {
			t.Errorf("DropText(%d): open text %q; want %q", tt.drop, text, tt.want)
		}
		if got := gjson.GetBytes(a.AppendOutput(nil), "1.content.0.text").String(); got != tt.want {
			t.Errorf("DropText(%d): output text %q; want %q", tt.drop, got, tt.want)
		}
	}
}

func TestResponsesAccumulatorRejects(t *testing.T) {
	var a ResponsesAccumulator
	for _, give := range []string{`[1]`, `{"type":`, `"x"`} {
		if _, err := a.Add([]byte(give)); !errors.Is(err, ErrInvalidChunk) {
			t.Errorf("Add(%s) = %v; want ErrInvalidChunk", give, err)
		}
	}
	if _, err := a.Add([]byte(`{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"server_error"}}}`)); !errors.Is(err, ErrUpstream) {
		t.Errorf("response.failed: %v; want ErrUpstream", err)
	}
	if !a.Done() || a.Status() != "failed" {
		t.Errorf("after response.failed Done, Status = %v, %q", a.Done(), a.Status())
	}
}

// FuzzResponsesAccumulator: no panic, and the calls it reports stay in range.
func FuzzResponsesAccumulator(f *testing.F) {
	fuzzStream(f, "testdata/responses/*.sse", func() streamAcc { return &ResponsesAccumulator{} })
}

func fuzzStream(f *testing.F, glob string, mk func() streamAcc) {
	files, _ := filepath.Glob(glob)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		r := NewReader(bytes.NewReader(b), 0)
		for {
			e, err := r.Next()
			if err != nil {
				break
			}
			if e.Data != nil {
				f.Add(bytes.Clone(e.Data))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a := mk()
		for range 2 { // twice: the second sees the state the first left
			u, _ := a.Add(data)
			if u.ToolCallDone >= 0 {
				if _, _, ok := a.ToolCallBytes(u.ToolCallDone); !ok {
					t.Fatalf("ToolCallDone %d is not a call", u.ToolCallDone)
				}
			}
		}
		_ = a.ToolCalls()
		_ = a.Text()
	})
}
