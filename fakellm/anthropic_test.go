package fakellm

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestAnthropicMatchesWireSamples(t *testing.T) {
	tests := []struct {
		name, sample string
		give         AnthropicAnswer
	}{
		{"tool use", "anthropic-messages-tool-use.sse", AnthropicAnswer{Text: "Reading the file.",
			Calls: []ToolCall{{Name: "read_file", Arguments: `{"path": "src/main.go"}`}}, ChunkSize: 100}},
		{"error", "anthropic-messages-error.sse", AnthropicAnswer{Text: "Hello", Error: "Overloaded", ErrorAfter: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAgainstSample(t, streamOf(tt.give.Render(true, "claude-sonnet-4-5", 100, 1)), tt.sample)
		})
	}
}

// TestAnthropicStreamContent reassembles each rendered stream the way a
// client does and checks it against the answer.
func TestAnthropicStreamContent(t *testing.T) {
	calls := []ToolCall{{Name: "bash", Arguments: `{"command":"make build"}`}, {ID: "toolu_fixed", Name: "todo"}}
	tests := []struct {
		name       string
		give       AnthropicAnswer
		wantEvents string
		wantStop   string
	}{
		{"text", AnthropicAnswer{Text: "Hello <world> & \"you\"\n", ChunkSize: 5},
			"message_start,content_block_start,ping,content_block_delta,content_block_stop,message_delta,message_stop", "end_turn"},
		{"text and calls", AnthropicAnswer{Text: "Running.", Calls: calls, ChunkSize: 4},
			"message_start,content_block_start,ping,content_block_delta,content_block_stop," +
				"content_block_start,content_block_delta,content_block_stop,content_block_start,content_block_delta,content_block_stop," +
				"message_delta,message_stop", "tool_use"},
		{"calls only", AnthropicAnswer{Calls: calls[:1], StopReason: "max_tokens"},
			"message_start,content_block_start,ping,content_block_delta,content_block_stop,message_delta,message_stop", "max_tokens"},
		{"error mid text", AnthropicAnswer{Text: "Partial answer", ChunkSize: 4, Error: "Overloaded", ErrorAfter: 4},
			"message_start,content_block_start,ping,content_block_delta,error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.give.Render(true, "claude", 400, 3)
			if r.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" || r.Status != http.StatusOK {
				t.Errorf("status %d, Content-Type %q", r.Status, r.Header.Get("Content-Type"))
			}
			evs := namedEvents(t, streamOf(r))
			if got := eventNames(evs); got != tt.wantEvents {
				t.Errorf("events = %s;\nwant %s", got, tt.wantEvents)
			}
			blocks := map[int64]string{}
			kinds := map[int64]string{}
			var stop string
			for _, e := range evs {
				d := gjson.Parse(e.Data)
				if d.Get("type").String() != e.Name {
					t.Errorf("event %s has type %q", e.Name, d.Get("type"))
				}
				i := d.Get("index").Int()
				switch e.Name {
				case "content_block_start":
					kinds[i] = d.Get("content_block.type").String()
					if kinds[i] == "tool_use" && (d.Get("content_block.input").Raw != "{}" || !strings.HasPrefix(d.Get("content_block.id").String(), "toolu_")) {
						t.Errorf("tool_use start %s; want input {} and a toolu_ id", e.Data)
					}
				case "content_block_delta":
					blocks[i] += d.Get("delta.text").String() + d.Get("delta.partial_json").String()
				case "message_delta":
					stop = d.Get("delta.stop_reason").String()
					if d.Get("usage.output_tokens").Int() <= 0 {
						t.Errorf("message_delta usage %s", d.Get("usage").Raw)
					}
				case "error":
					if d.Get("error.message").String() != tt.give.Error {
						t.Errorf("error event %s", e.Data)
					}
				}
			}
			if stop != tt.wantStop {
				t.Errorf("stop_reason %q; want %q", stop, tt.wantStop)
			}
			if tt.give.Error != "" {
				return
			}
			n := int64(0)
			if tt.give.Text != "" {
				if blocks[0] != tt.give.Text || kinds[0] != "text" {
					t.Errorf("text block %q (%s); want %q", blocks[0], kinds[0], tt.give.Text)
				}
				n++
			}
			for _, c := range tt.give.Calls {
				want := c.Arguments
				if want == "" {
					want = "{}"
				}
				if blocks[n] != want || kinds[n] != "tool_use" {
					t.Errorf("block %d input %q (%s); want %q", n, blocks[n], kinds[n], want)
				}
				n++
			}
		})
	}
}

func TestAnthropicNeverEnd(t *testing.T) {
	a := AnthropicAnswer{NeverEnd: true}
	r := a.Render(true, "", 10, 1)
	if len(r.RawEvents) < NeverEndEvents || r.Delay < neverEndMinDelay {
		t.Fatalf("%d events, delay %v; want at least %d paced events", len(r.RawEvents), r.Delay, NeverEndEvents)
	}
	tail := string(r.RawEvents[len(r.RawEvents)-1])
	if !strings.Contains(tail, `"text_delta","text":"`+neverEndTick+`"`) {
		t.Errorf("last event %q; want a repeated tick", tail)
	}
	if all := streamOf(r); bytes.Contains(all, []byte("message_stop")) || bytes.Contains(all, []byte("content_block_stop")) {
		t.Errorf("a never-ending stream stops")
	}
}

func TestAnthropicNonStream(t *testing.T) {
	tests := []struct {
		name       string
		give       AnthropicAnswer
		wantStatus int
		want       string // gjson path=value pairs
	}{
		{"text", AnthropicAnswer{Text: "Hi.", ID: "msg_1", Model: "m"}, 200,
			`type=message|role=assistant|content.#=1|content.0.type=text|content.0.text=Hi.|stop_reason=end_turn|model=m|id=msg_1|stop_sequence=`},
		{"call", AnthropicAnswer{Calls: []ToolCall{{ID: "toolu_1", Name: "bash", Arguments: `{"command":"ls"}`}}}, 200,
			`content.#=1|content.0.type=tool_use|content.0.id=toolu_1|content.0.input.command=ls|stop_reason=tool_use|model=req-model`},
		{"call with bad arguments", AnthropicAnswer{Calls: []ToolCall{{Name: "bash", Arguments: `[1]`}}}, 200, `content.0.input={}`},
		{"error", AnthropicAnswer{Error: "Overloaded"}, 529, `type=error|error.type=overloaded_error|error.message=Overloaded`},
		{"rejected", AnthropicAnswer{Status: 401}, 401, `type=error|error.type=authentication_error|error.message=Unauthorized`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.give.Render(false, "req-model", 40, 1)
			if r.Status != tt.wantStatus || r.Header.Get("Content-Type") != "application/json" || r.RawEvents != nil {
				t.Errorf("status %d, Content-Type %q", r.Status, r.Header.Get("Content-Type"))
			}
			if !gjson.ValidBytes(r.Raw) || bytes.ContainsAny(r.Raw, "\n ") {
				t.Errorf("body is not compact JSON: %s", r.Raw)
			}
			for _, kv := range strings.Split(tt.want, "|") {
				k, v, _ := strings.Cut(kv, "=")
				if got := gjson.GetBytes(r.Raw, k); got.String() != v && got.Raw != v {
					t.Errorf("%s = %s; want %s", k, got.Raw, v)
				}
			}
		})
	}
}
