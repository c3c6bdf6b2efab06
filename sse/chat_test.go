package sse

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/rawjson"
)

// addAll feeds chunks to a fresh accumulator and returns the result and the
// deltas seen, rendered for comparison.
func addAll(t *testing.T, chunks []string) (*ChatAccumulator, []string, []error) {
	t.Helper()
	var a ChatAccumulator
	var deltas []string
	var errs []error
	for _, c := range chunks {
		ds, err := a.Add([]byte(c))
		for _, d := range ds {
			deltas = append(deltas, fmt.Sprintf("c%d content=%q reasoning=%q tool=%t started=%d/%d finish=%q",
				d.Choice, d.Text, d.Reasoning, d.ToolCall, d.ToolCallStarted, d.ToolCallsStarted, d.FinishReason))
		}
		errs = append(errs, err)
	}
	return &a, deltas, errs
}

func choicesJSON(t *testing.T, cs []Choice) string {
	t.Helper()
	b, err := json.Marshal(cs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAccumulatorToolCalls(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string // Choices() as JSON
	}{
		{
			name: "fragments by index",
			give: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":1}"}}]}}]}`,
			},
			want: `[{"index":0,"content":"","tool_calls":[{"index":0,"id":"c1","type":"function","name":"f","arguments":"{\"a\":1}"}]}]`,
		},
		{
			name: "same index twice in one chunk (vLLM hermes)",
			give: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c1","type":"function","index":0,"function":{"name":"f"}},{"index":0,"function":{"arguments":"{}"}}]}}]}`,
			},
			want: `[{"index":0,"content":"","tool_calls":[{"index":0,"id":"c1","type":"function","name":"f","arguments":"{}"}]}]`,
		},
		{
			name: "repeated id, type and name are not new calls",
			give: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"}"}}]},"finish_reason":"tool_calls"}]}`,
			},
			want: `[{"index":0,"content":"","finish_reason":"tool_calls","tool_calls":[{"index":0,"id":"c1","type":"function","name":"f","arguments":"{}"}]}]`,
		},
		{
			name: "missing id and name on later chunks (Gemma4 parser)",
			give: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"g"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"[1]"}}]}}]}`,
			},
			want: `[{"index":0,"content":"","tool_calls":[{"index":1,"id":"","type":"","name":"g","arguments":"[1]"}]}]`,
		},
		{
			name: "a new id without a name continues the call",
			give: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x1","function":{"name":"f","arguments":"{"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x2","function":{"arguments":"}"}}]}}]}`,
			},
			want: `[{"index":0,"content":"","tool_calls":[{"index":0,"id":"x1","type":"","name":"f","arguments":"{}"}]}]`,
		},
		{
			name: "arguments as an object",
			give: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":{"x": [1, "}"]}}}]}}]}`,
			},
			want: `[{"index":0,"content":"","tool_calls":[{"index":0,"id":"c","type":"","name":"f","arguments":"{\"x\": [1, \"}\"]}"}]}]`,
		},
		{
			name: "no index continues the last call",
			give: []string{
				`{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{"}}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"}"}}]}}]}`,
				`{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"[]"}}]}}]}`,
			},
			want: `[{"index":0,"content":"","tool_calls":[{"index":0,"id":"a","type":"","name":"f","arguments":"{}"},{"index":1,"id":"b","type":"","name":"g","arguments":"[]"}]}]`,
		},
		{
			name: "non-object entries ignored",
			give: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[1,"x",null,[],{"index":0,"function":{"name":"f"}}]}}]}`,
			},
			want: `[{"index":0,"content":"","tool_calls":[{"index":0,"id":"","type":"","name":"f","arguments":""}]}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _, errs := addAll(t, tt.give)
			for _, err := range errs {
				if err != nil {
					t.Fatalf("Add: %v", err)
				}
			}
			if got := choicesJSON(t, a.Choices()); got != tt.want {
				t.Errorf("Choices() = %s; want %s", got, tt.want)
			}
		})
	}
}

func TestAccumulatorDeltas(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want []string
	}{
		{
			name: "escapes decoded",
			give: []string{`{"choices":[{"index":0,"delta":{"content":"a\"b\\c\n\u00e9\ud83d\ude00\/"}}]}`},
			want: []string{`c0 content="a\"b\\c\né😀/" reasoning="" tool=false started=-1/0 finish=""`},
		},
		{
			name: "null content and role chunk",
			give: []string{`{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]}`},
			want: []string{`c0 content="" reasoning="" tool=false started=-1/0 finish=""`},
		},
		{
			name: "reasoning under either name, once",
			give: []string{
				`{"choices":[{"index":0,"delta":{"reasoning_content":"r1"}}]}`,
				`{"choices":[{"index":0,"delta":{"reasoning":"r2","reasoning_content":"r2"}}]}`,
				`{"choices":[{"index":0,"delta":{"reasoning_content":null,"reasoning":"r3"}}]}`,
			},
			want: []string{
				`c0 content="" reasoning="r1" tool=false started=-1/0 finish=""`,
				`c0 content="" reasoning="r2" tool=false started=-1/0 finish=""`,
				`c0 content="" reasoning="r3" tool=false started=-1/0 finish=""`,
			},
		},
		{
			name: "two calls start in one chunk (Ollama)",
			give: []string{
				`{"choices":[{"index":0,"delta":{"content":"","tool_calls":[{"id":"a","index":0,"function":{"name":"f","arguments":"{}"}},{"id":"b","index":1,"function":{"name":"g","arguments":"{}"}}]}}]}`,
			},
			want: []string{`c0 content="" reasoning="" tool=true started=0/2 finish=""`},
		},
		{
			name: "n=2 in one chunk and finish",
			give: []string{
				`{"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}`,
			},
			want: []string{
				`c1 content="b" reasoning="" tool=false started=-1/0 finish=""`,
				`c0 content="a" reasoning="" tool=false started=-1/0 finish="stop"`,
			},
		},
		{
			name: "usage chunk with no choices calls nothing",
			give: []string{`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, _ := addAll(t, tt.give)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("deltas =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestAccumulatorAddErrors(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		wantErr   error
		wantRaw   bool
		wantDone  bool
		wantDelta bool
	}{
		{name: "done", give: "[DONE]", wantDone: true},
		{name: "done with spaces", give: " [DONE]\n", wantDone: true},
		{name: "empty", give: ""},
		{name: "openai error", give: `{"error":{"message":"x","type":"server_error"}}`, wantErr: ErrUpstream, wantRaw: true},
		{name: "responses error", give: `{"type":"error","code":"server_error","message":"m"}`, wantErr: ErrUpstream, wantRaw: true},
		{name: "error beside choices wins", give: `{"choices":[{"index":0,"delta":{"content":"x"}}],"error":{"message":"m"}}`, wantErr: ErrUpstream, wantRaw: true},
		{name: "null error is no error", give: `{"error":null,"choices":[{"index":0,"delta":{"content":"x"}}]}`, wantDelta: true},
		{name: "not json", give: `{"choices":[`, wantErr: ErrInvalidChunk},
		{name: "array", give: `[1,2]`, wantErr: ErrInvalidChunk},
		{name: "string", give: `"x"`, wantErr: ErrInvalidChunk},
		{name: "choices not an array", give: `{"choices":{"index":0}}`},
		{name: "anthropic event", give: `{"type":"message_start","message":{"id":"m"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a ChatAccumulator
			ds, err := a.Add([]byte(tt.give))
			called := len(ds) > 0
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Add(%s) = %v; want %v", tt.give, err, tt.wantErr)
			}
			if got := a.ErrorRaw() != nil; got != tt.wantRaw {
				t.Errorf("ErrorRaw() = %q; want set %t", a.ErrorRaw(), tt.wantRaw)
			}
			if tt.wantRaw && string(a.ErrorRaw()) != strings.TrimSpace(tt.give) {
				t.Errorf("ErrorRaw() = %s; want %s", a.ErrorRaw(), tt.give)
			}
			if a.Done() != tt.wantDone {
				t.Errorf("Done() = %t; want %t", a.Done(), tt.wantDone)
			}
			if called != tt.wantDelta {
				t.Errorf("updates returned = %t; want %t", called, tt.wantDelta)
			}
		})
	}
}

func TestAccumulatorMetadataAndReset(t *testing.T) {
	var a ChatAccumulator
	chunks := []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"x"}}],"created":5,"id":"first","model":"m1","system_fingerprint":"fp1"}`,
		`{"id":"second","model":"m2","created":6,"system_fingerprint":"fp2","choices":[{"index":0,"delta":{"content":"y"}}],"usage":null}`,
		`{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":5,"total_tokens":9}}`,
	}
	for _, c := range chunks {
		if _, err := a.Add([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	u, ok := a.Usage()
	got := fmt.Sprintf("%s %s %d %s %+v %t", a.ID(), a.Model(), a.Created(), a.SystemFingerprint(), u, ok)
	if want := "first m1 5 fp1 {PromptTokens:4 CompletionTokens:5 TotalTokens:9} true"; got != want {
		t.Errorf("metadata = %s; want %s", got, want)
	}
	if got := choicesJSON(t, a.Choices()); got != `[{"index":0,"role":"assistant","content":"xy"}]` {
		t.Errorf("Choices() = %s", got)
	}
	a.Reset()
	if a.ID() != "" || a.Choices() != nil || a.Done() || a.ErrorRaw() != nil {
		t.Fatalf("Reset left state: id %q choices %v", a.ID(), a.Choices())
	}
	if _, ok := a.Usage(); ok {
		t.Errorf("Reset left usage")
	}
	if _, err := a.Add([]byte(`{"id":"third","choices":[{"index":2,"delta":{"content":"z"}}]}`)); err != nil {
		t.Fatal(err)
	}
	if got := choicesJSON(t, a.Choices()); a.ID() != "third" || got != `[{"index":2,"content":"z"}]` {
		t.Errorf("after Reset: id %q Choices() = %s", a.ID(), got)
	}
}

func TestAccumulatorLimits(t *testing.T) {
	var a ChatAccumulator
	var b strings.Builder
	b.WriteString(`{"choices":[`)
	for i := range maxChoices + 10 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"index":%d,"delta":{"content":"x"}}`, i*1000000007)
	}
	b.WriteString(`]}`)
	ds, err := a.Add([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	calls := len(ds)
	if n := len(a.Choices()); n != maxChoices || calls != maxChoices {
		t.Errorf("choices kept %d, fn calls %d; want %d", n, calls, maxChoices)
	}
}

func TestToolCallBytes(t *testing.T) {
	a, _, _ := addAll(t, []string{
		`{"choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":"}},{"index":1,"id":"b","function":{"name":"g","arguments":"[]"}}]}}]}`,
		`{"choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}`,
	})
	tests := []struct {
		choice, pos int
		want        string
	}{
		{1, 0, `f {"x":1} true`},
		{1, 1, `g [] true`},
		{1, 2, `  false`},
		{1, -1, `  false`},
		{0, 0, `  false`},
	}
	for _, tt := range tests {
		name, args, ok := a.ToolCallBytes(tt.choice, tt.pos)
		if got := fmt.Sprintf("%s %s %t", name, args, ok); got != tt.want {
			t.Errorf("ToolCallBytes(%d, %d) = %s; want %s", tt.choice, tt.pos, got, tt.want)
		}
	}
}

// TestAccumulatorDropText: with DropText the callback sees the same deltas
// on every recorded chat stream, Choices keeps everything but the text, and
// the text buffer holds one delta, not the answer.
func TestAccumulatorDropText(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*chat*.sse"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no chat fixtures: %v", err)
	}
	long := make([]string, 0, 201)
	for i := range 200 {
		long = append(long, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":"word %d ","reasoning_content":"why %d "}}]}`, i, i))
	}
	streams := map[string][]string{"200 deltas": long}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader(bytes.NewReader(raw), 0)
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			if len(ev.Data) > 0 && string(ev.Data) != "[DONE]" {
				streams[filepath.Base(p)] = append(streams[filepath.Base(p)], string(ev.Data))
			}
		}
	}
	for name, chunks := range streams {
		t.Run(name, func(t *testing.T) {
			kept, wantDeltas, _ := addAll(t, chunks)
			var dropped ChatAccumulator
			dropped.DropText = true
			var got []string
			for _, c := range chunks {
				ds, _ := dropped.Add([]byte(c))
				for _, d := range ds {
					got = append(got, fmt.Sprintf("c%d content=%q reasoning=%q tool=%t started=%d/%d finish=%q",
						d.Choice, d.Text, d.Reasoning, d.ToolCall, d.ToolCallStarted, d.ToolCallsStarted, d.FinishReason))
				}
			}
			if strings.Join(got, "\n") != strings.Join(wantDeltas, "\n") {
				t.Errorf("deltas with DropText =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantDeltas, "\n"))
			}
			want := kept.Choices()
			for i := range want {
				want[i].Content, want[i].Reasoning = "", ""
			}
			if g, w := choicesJSON(t, dropped.Choices()), choicesJSON(t, want); g != w {
				t.Errorf("Choices() with DropText = %s; want %s", g, w)
			}
			for _, cs := range dropped.choices {
				if name == "200 deltas" && cap(cs.content) > 64 || cap(cs.reasoning) > 64 {
					t.Errorf("choice %d holds %d bytes of content, %d of reasoning; want one delta's", cs.index,
						cap(cs.content), cap(cs.reasoning))
				}
			}
		})
	}
}

// TestAccumulatorReadsTape: the chunks of a chat stream, tool calls
// included, fit a rawjson.Tape, so Add reads them without scanning
// (FuzzAccumulatorTape holds that walk to the scanning one).
func TestAccumulatorReadsTape(t *testing.T) {
	chunks := []string{
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"p\":"}}]},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
	}
	for _, c := range chunks {
		var tp rawjson.Tape
		if !rawjson.ValidTape([]byte(c), &tp) || len(tp.Values()) == 0 {
			t.Errorf("no tape for %s", c)
		}
	}
}
