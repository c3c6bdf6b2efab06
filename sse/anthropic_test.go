package sse

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"
)

func TestAnthropicAccumulator(t *testing.T) {
	tests := []struct {
		file          string
		wantID        string
		wantModel     string
		wantText      string
		wantReasoning string
		wantCalls     []ToolCall
		wantDone      []int
		wantStarted   []int // block index of each call as it starts
		wantFinished  bool
		wantStop      string
		wantErr       error
		wantUsage     Usage
	}{
		{
			file: "tool-use.sse", wantID: "msg_01LG", wantModel: "claude-sonnet-4-5", wantText: "Reading the file.",
			wantCalls: []ToolCall{{Index: 1, ID: "toolu_01LGabc", Type: "tool_use", Name: "read_file", Arguments: `{"path": "src/main.go"}`}},
			wantDone:  []int{0}, wantStarted: []int{1},
			wantFinished: true, wantStop: "tool_use", wantUsage: Usage{472, 48, 520},
		},
		{
			file: "thinking-two-tools.sse", wantID: "msg_01TH", wantModel: "claude-opus-4-1", wantReasoning: "Two files to read.",
			wantCalls: []ToolCall{
				{Index: 1, ID: "toolu_A", Type: "tool_use", Name: "read_file", Arguments: `{"path": "a.go"}`},
				{Index: 2, ID: "toolu_B", Type: "tool_use", Name: "read_file", Arguments: `{"path":"b.go"}`},
			},
			wantDone: []int{0, 1}, wantStarted: []int{1, 2},
			wantFinished: true, wantStop: "tool_use", wantUsage: Usage{900, 71, 971},
		},
		{file: "error.sse", wantID: "msg_01LH", wantModel: "claude-sonnet-4-5", wantErr: ErrUpstream, wantUsage: Usage{10, 1, 11}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var a AnthropicAccumulator
			f := fold(t, filepath.Join("testdata/anthropic", tt.file), &a)
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
			if a.Done() != tt.wantFinished || a.StopReason() != tt.wantStop {
				t.Errorf("Done, StopReason = %v, %q; want %v, %q", a.Done(), a.StopReason(), tt.wantFinished, tt.wantStop)
			}
			if u, _ := a.Usage(); u != tt.wantUsage {
				t.Errorf("Usage = %+v; want %+v", u, tt.wantUsage)
			}
			if tt.wantErr == nil && len(f.errs) > 0 || tt.wantErr != nil && (len(f.errs) != 1 || !errors.Is(f.errs[0], tt.wantErr)) {
				t.Errorf("errors = %v; want %v", f.errs, tt.wantErr)
			}
			if tt.wantErr != nil && gjson.GetBytes(a.ErrorRaw(), "error.type").String() != "overloaded_error" {
				t.Errorf("ErrorRaw = %s", a.ErrorRaw())
			}
			if _, open := a.OpenBlock(); open && tt.wantErr == nil {
				t.Errorf("a block is still open after %s", tt.file)
			}
		})
	}
}

func TestAnthropicOpenBlock(t *testing.T) {
	var a AnthropicAccumulator
	for _, d := range []string{
		`{"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the the the"}}`,
	} {
		if _, err := a.Add([]byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	if i, ok := a.OpenBlock(); !ok || i != 0 || a.NextBlockIndex() != 1 {
		t.Errorf("OpenBlock = %d, %v; NextBlockIndex = %d", i, ok, a.NextBlockIndex())
	}
	// A delta for an unknown block and a stray stop change nothing.
	_, _ = a.Add([]byte(`{"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"x"}}`))
	_, _ = a.Add([]byte(`{"type":"content_block_stop","index":9}`))
	if a.Text() != "the the the" {
		t.Errorf("Text = %q", a.Text())
	}
}

// FuzzAnthropicAccumulator: no panic, and the calls it reports stay in range.
func FuzzAnthropicAccumulator(f *testing.F) {
	fuzzStream(f, "testdata/anthropic/*.sse", func() streamAcc { return &AnthropicAccumulator{} })
}
