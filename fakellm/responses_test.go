package fakellm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// namedEvent is one `event:` + `data:` frame of a Responses or Anthropic
// stream.
type namedEvent struct {
	Name string
	Data string
}

// namedEvents splits a stream into its frames; it fails on a frame that is
// not exactly one event line and one data line of valid JSON.
func namedEvents(t *testing.T, b []byte) []namedEvent {
	t.Helper()
	var out []namedEvent
	for _, fr := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(fr, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") || strings.Contains(data, "\n") || !gjson.Valid(data) {
			t.Fatalf("frame %q is not one event line and one JSON data line", fr)
		}
		out = append(out, namedEvent{strings.TrimPrefix(name, "event: "), data})
	}
	return out
}

// eventNames lists the event names, runs of one name collapsed, so that
// delta counts do not matter.
func eventNames(evs []namedEvent) string {
	var names []string
	for _, e := range evs {
		if len(names) == 0 || names[len(names)-1] != e.Name {
			names = append(names, e.Name)
		}
	}
	return strings.Join(names, ",")
}

// keysInOrder checks that every member of want appears in got, in want's
// order and with the same JSON type, recursively (arrays by their first
// element). The wire samples are abbreviated re-typings, so got may have
// more members; it must not reorder or drop theirs.
func keysInOrder(got, want gjson.Result, path string) error {
	if got.Type != want.Type || got.IsObject() != want.IsObject() || got.IsArray() != want.IsArray() {
		return fmt.Errorf("%s: got %s; want the type of %s", path, got.Raw, want.Raw)
	}
	switch {
	case want.IsObject():
		var gotKeys []string
		gotVals := map[string]gjson.Result{}
		got.ForEach(func(k, v gjson.Result) bool {
			gotKeys = append(gotKeys, k.String())
			gotVals[k.String()] = v
			return true
		})
		pos := 0
		var err error
		want.ForEach(func(k, v gjson.Result) bool {
			key := k.String()
			for pos < len(gotKeys) && gotKeys[pos] != key {
				pos++
			}
			if pos == len(gotKeys) {
				err = fmt.Errorf("%s: member %q missing or out of order in %s", path, key, got.Raw)
				return false
			}
			err = keysInOrder(gotVals[key], v, path+"."+key)
			return err == nil
		})
		return err
	case want.IsArray():
		w, g := want.Array(), got.Array()
		if len(w) > 0 && len(g) > 0 {
			return keysInOrder(g[0], w[0], path+".0")
		}
		if (len(w) == 0) != (len(g) == 0) {
			return fmt.Errorf("%s: got %s; want %s", path, got.Raw, want.Raw)
		}
	}
	return nil
}

// checkAgainstSample compares a rendered stream with a wire sample: the
// same event sequence, and each sample event's members in order in the
// rendered event at the same position of the collapsed sequence.
func checkAgainstSample(t *testing.T, got []byte, sample string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "wire-samples", sample))
	if err != nil {
		t.Fatal(err)
	}
	gs, ws := namedEvents(t, got), namedEvents(t, raw)
	if g, w := eventNames(gs), eventNames(ws); g != w {
		t.Fatalf("events = %s;\nwant (from %s) %s\nbytes:\n%s", g, sample, w, got)
	}
	// Pair the first event of each run.
	first := func(evs []namedEvent) []namedEvent {
		var out []namedEvent
		for i, e := range evs {
			if i == 0 || evs[i-1].Name != e.Name {
				out = append(out, e)
			}
		}
		return out
	}
	gf, wf := first(gs), first(ws)
	for i := range wf {
		if err := keysInOrder(gjson.Parse(gf[i].Data), gjson.Parse(wf[i].Data), wf[i].Name); err != nil {
			t.Errorf("event %d: %v", i, err)
		}
	}
}

// streamOf concatenates a rendered answer's events.
func streamOf(r Response) []byte { return bytes.Join(r.RawEvents, nil) }

func TestResponsesMatchesWireSamples(t *testing.T) {
	tests := []struct {
		name, sample string
		give         ResponsesAnswer
	}{
		{"function call", "openai-responses-function-call.sse",
			ResponsesAnswer{Calls: []ToolCall{{Name: "read_file", Arguments: `{"path":"src/main.go"}`}}, ChunkSize: 9}},
		{"error", "openai-responses-error.sse", ResponsesAnswer{Text: "Hello", Error: "The server had an error", ErrorAfter: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAgainstSample(t, streamOf(tt.give.Render(true, "gpt-4.1", 100, 1)), tt.sample)
		})
	}
}

// TestResponsesStreamContent reassembles each rendered stream the way a
// client does and checks what it says against the answer.
func TestResponsesStreamContent(t *testing.T) {
	calls := []ToolCall{{Name: "bash", Arguments: `{"command":"make build"}`}, {ID: "call_fixed", Name: "grep", Arguments: `{"pattern":"é\"x"}`}}
	tests := []struct {
		name       string
		give       ResponsesAnswer
		wantEvents string
		wantOutput string // types of the completed output items
	}{
		{"text", ResponsesAnswer{Text: "Hello <world> & \"you\"\n", ChunkSize: 5},
			"response.created,response.in_progress,response.output_item.added,response.content_part.added,response.output_text.delta," +
				"response.output_text.done,response.content_part.done,response.output_item.done,response.completed", "message"},
		{"text and calls", ResponsesAnswer{Text: "Running.", Calls: calls, ChunkSize: 4},
			"response.created,response.in_progress,response.output_item.added,response.content_part.added,response.output_text.delta," +
				"response.output_text.done,response.content_part.done,response.output_item.done," +
				"response.output_item.added,response.function_call_arguments.delta,response.function_call_arguments.done,response.output_item.done," +
				"response.output_item.added,response.function_call_arguments.delta,response.function_call_arguments.done,response.output_item.done," +
				"response.completed", "message,function_call,function_call"},
		{"calls only", ResponsesAnswer{Calls: calls[:1]},
			"response.created,response.in_progress,response.output_item.added,response.function_call_arguments.delta," +
				"response.function_call_arguments.done,response.output_item.done,response.completed", "function_call"},
		{"error mid text", ResponsesAnswer{Text: "Partial answer", ChunkSize: 4, Error: "boom", ErrorAfter: 5},
			"response.created,response.in_progress,response.output_item.added,response.content_part.added,response.output_text.delta,error", ""},
		{"error past the end", ResponsesAnswer{Text: "ok", Error: "late", ErrorAfter: 99},
			"response.created,response.in_progress,response.output_item.added,response.content_part.added,response.output_text.delta," +
				"response.output_text.done,response.content_part.done,response.output_item.done,error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.give.Render(true, "gpt-4.1", 400, 3)
			if r.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" || r.Status != http.StatusOK {
				t.Errorf("status %d, Content-Type %q", r.Status, r.Header.Get("Content-Type"))
			}
			evs := namedEvents(t, streamOf(r))
			if got := eventNames(evs); got != tt.wantEvents {
				t.Errorf("events = %s;\nwant %s", got, tt.wantEvents)
			}
			var text string
			args := map[string]string{}
			for i, e := range evs {
				d := gjson.Parse(e.Data)
				if d.Get("type").String() != e.Name || d.Get("sequence_number").Int() != int64(i) {
					t.Errorf("event %d %s: type %q, sequence_number %d", i, e.Name, d.Get("type"), d.Get("sequence_number").Int())
				}
				switch e.Name {
				case "response.output_text.delta":
					text += d.Get("delta").String()
				case "response.function_call_arguments.delta":
					args[d.Get("item_id").String()] += d.Get("delta").String()
				case "response.output_text.done":
					if d.Get("text").String() != text || text != tt.give.Text {
						t.Errorf("text deltas %q, done %q; want %q", text, d.Get("text"), tt.give.Text)
					}
				case "response.function_call_arguments.done":
					if got := args[d.Get("item_id").String()]; got != d.Get("arguments").String() {
						t.Errorf("argument deltas %q; done says %q", got, d.Get("arguments"))
					}
				case "error":
					if d.Get("message").String() != tt.give.Error || d.Get("code").String() != "server_error" {
						t.Errorf("error event %s", e.Data)
					}
				case "response.completed":
					resp := d.Get("response")
					var types []string
					for _, it := range resp.Get("output").Array() {
						types = append(types, it.Get("type").String())
					}
					if strings.Join(types, ",") != tt.wantOutput || resp.Get("status").String() != "completed" {
						t.Errorf("completed output %s; want %s", resp.Get("output").Raw, tt.wantOutput)
					}
					u := resp.Get("usage")
					if u.Get("total_tokens").Int() != u.Get("input_tokens").Int()+u.Get("output_tokens").Int() || u.Get("input_tokens").Int() != 101 {
						t.Errorf("usage %s", u.Raw)
					}
					if tt.give.Text != "" && resp.Get("output.0.content.0.text").String() != tt.give.Text {
						t.Errorf("completed text %q", resp.Get("output.0.content.0.text"))
					}
				}
			}
			if len(tt.give.Calls) > 0 && len(args) != len(tt.give.Calls) {
				t.Errorf("streamed arguments of %d calls; want %d", len(args), len(tt.give.Calls))
			}
		})
	}
}

func TestResponsesNeverEnd(t *testing.T) {
	a := ResponsesAnswer{Text: "again ", NeverEnd: true, Calls: []ToolCall{{Name: "x"}}}
	r := a.Render(true, "", 10, 1)
	if len(r.RawEvents) < NeverEndEvents || r.Delay < neverEndMinDelay {
		t.Fatalf("%d events, delay %v; want at least %d paced events", len(r.RawEvents), r.Delay, NeverEndEvents)
	}
	tail := string(r.RawEvents[len(r.RawEvents)-1])
	if !strings.HasPrefix(tail, "event: response.output_text.delta\n") || !strings.Contains(tail, `"delta":"again "`) {
		t.Errorf("last event %q; want a repeated text delta", tail)
	}
	if all := streamOf(r); bytes.Contains(all, []byte("response.completed")) || bytes.Contains(all, []byte("function_call")) {
		t.Errorf("a never-ending stream completes or calls a function")
	}
}

func TestResponsesNonStream(t *testing.T) {
	tests := []struct {
		name       string
		give       ResponsesAnswer
		wantStatus int
		want       string // gjson path=value pairs
	}{
		{"text", ResponsesAnswer{Text: "Hi.", ID: "resp_1", Model: "m"}, 200,
			`object=response|status=completed|output.0.type=message|output.0.content.0.text=Hi.|output.0.role=assistant|model=m|id=resp_1`},
		{"call", ResponsesAnswer{Calls: []ToolCall{{ID: "call_1", Name: "bash", Arguments: `{"command":"ls"}`}}}, 200,
			`output.#=1|output.0.type=function_call|output.0.call_id=call_1|output.0.name=bash|output.0.arguments={"command":"ls"}|model=req-model`},
		{"error", ResponsesAnswer{Error: "overloaded"}, 500, `error.message=overloaded|error.type=server_error|error.code=server_error`},
		{"rejected", ResponsesAnswer{Status: 400, Text: "x"}, 400, `error.message=Bad Request|error.type=invalid_request_error`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.give.Render(false, "req-model", 40, 1)
			if r.Status != tt.wantStatus || r.Header.Get("Content-Type") != "application/json" || r.RawEvents != nil {
				t.Errorf("status %d, Content-Type %q", r.Status, r.Header.Get("Content-Type"))
			}
			if !gjson.ValidBytes(r.Raw) || !bytes.HasPrefix(r.Raw, []byte("{\n  \"")) || !bytes.HasSuffix(r.Raw, []byte("}\n")) {
				t.Errorf("body is not pretty-printed JSON: %s", r.Raw)
			}
			for _, kv := range strings.Split(tt.want, "|") {
				k, v, _ := strings.Cut(kv, "=")
				if got := gjson.GetBytes(r.Raw, k).String(); got != v {
					t.Errorf("%s = %q; want %q", k, got, v)
				}
			}
		})
	}
}

// TestAPIsGolden pins the exact bytes of the Responses and Anthropic
// renderings (go test -run APIsGolden -update).
func TestAPIsGolden(t *testing.T) {
	call := ToolCall{Name: "bash", Arguments: `{"command":"make build"}`}
	resp := ResponsesAnswer{Text: "Building <it> & \"now\".", Calls: []ToolCall{call}, ChunkSize: 7}
	anth := AnthropicAnswer{Text: "Building <it> & \"now\".", Calls: []ToolCall{call}, ChunkSize: 7}
	for _, stream := range []bool{true, false} {
		ext := map[bool]string{true: ".sse", false: ".json"}[stream]
		for name, r := range map[string]Response{
			"responses-tools" + ext: resp.Render(stream, "gpt-4.1", 200, 7),
			"anthropic-tools" + ext: anth.Render(stream, "claude-sonnet-4-5", 200, 7),
		} {
			t.Run(name, func(t *testing.T) {
				got := r.Raw
				if stream {
					got = streamOf(r)
				}
				path := filepath.Join("testdata", "golden", name)
				if *update {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("render(%s) =\n%s\nwant\n%s", name, got, want)
				}
			})
		}
	}
}

// TestAPIRulesServe plays both rules through a real Server: each path gets
// its API's answer, streamed or not as the request asks, and the exchange
// records the exact bytes sent.
func TestAPIRulesServe(t *testing.T) {
	s := Start(t, Script{Rules: []Rule{
		ResponsesRule(func(*Request) ResponsesAnswer { return ResponsesAnswer{Text: "from responses", ChunkSize: 100} }),
		AnthropicRule(func(*Request) AnthropicAnswer { return AnthropicAnswer{Text: "from messages", ChunkSize: 100} }),
	}})
	tests := []struct {
		path, body, wantType, wantText string
	}{
		{"/v1/responses", `{"model":"gpt","input":"hi"}`, "application/json", "from responses"},
		{"/v1/responses", `{"model":"gpt","input":"hi","stream":true}`, "text/event-stream; charset=utf-8", "from responses"},
		{"/v1/messages", `{"model":"claude","max_tokens":9,"messages":[]}`, "application/json", "from messages"},
		{"/v1/messages", `{"model":"claude","max_tokens":9,"messages":[],"stream":true}`, "text/event-stream; charset=utf-8", "from messages"},
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	for i, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+tt.path, strings.NewReader(tt.body))
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tt.wantType || !bytes.Contains(got, []byte(tt.wantText)) {
			t.Errorf("%s %s: %d %q %s", tt.path, tt.body, resp.StatusCode, resp.Header.Get("Content-Type"), got)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		xs, err := s.Wait(ctx, func(xs []Exchange) bool { return len(xs) > i && xs[i].Done })
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(xs[i].Body, got) {
			t.Errorf("%s: recorded body differs from what the client read", tt.path)
		}
	}
}
