package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// responsesHistory is a Responses API request whose agent ran the same
// failing command n times.
func responsesHistory(n int, stream bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":"gpt-4.1","stream":%v,"instructions":"You are an agent.","input":[{"role":"user","content":"Fix the build."}`, stream)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"type":"function_call","call_id":"call_%d","name":"bash","arguments":"{\"command\":\"make build\"}"}`, i)
		fmt.Fprintf(&b, `,{"type":"function_call_output","call_id":"call_%d","output":"make: *** No rule to make target 'build'.  Stop.\nexit code 2"}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// anthropicHistory is the same agent speaking Anthropic Messages.
func anthropicHistory(n int, stream bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":%v,"system":"You are an agent.","messages":[{"role":"user","content":"Fix the build."}`, stream)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%d","name":"bash","input":{"command":"make build"}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":"make: *** No rule to make target 'build'.  Stop.","is_error":true}]}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func TestOtherAPIsLadder(t *testing.T) {
	tests := []struct {
		name, path string
		history    func(int, bool) string
		// injected returns the text the upstream saw where auto placement puts it.
		injected func(body string) string
		// final returns the LOOP_DETECTED text of loopguard's own answer.
		final func(answer string) string
	}{
		{"responses", "/v1/responses", responsesHistory,
			func(b string) string { return gjson.Get(b, "input.@reverse.0.output").String() },
			func(a string) string { return gjson.Get(a, "output.0.content.0.text").String() }},
		{"anthropic", "/v1/messages", anthropicHistory,
			func(b string) string { return gjson.Get(b, "messages.@reverse.0.content.@reverse.0.text").String() },
			func(a string) string { return gjson.Get(a, "content.0.text").String() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"id":"x","ok":true}`)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			for _, st := range []struct {
				calls int
				want  string
				text  string
			}{{1, "none", ""}, {3, "warn", "[loopguard]"}, {4, "constrain", "<loop-recovery"}, {5, "terminate", ""}} {
				body := tt.history(st.calls, false)
				req, _ := http.NewRequest("POST", base+tt.path, strings.NewReader(body))
				req.Header.Set("X-Session-ID", "api-"+tt.name)
				req.Header.Set("x-api-key", "sk-ant-test")
				req.Header.Set("anthropic-version", "2023-06-01")
				resp, err := newClient().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				answer, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if a := resp.Header.Get(HeaderAction); a != st.want {
					t.Fatalf("%d calls: action %q; want %q (%s)", st.calls, a, st.want, answer)
				}
				if st.want == "terminate" {
					if txt := tt.final(string(answer)); !strings.HasPrefix(txt, "LOOP_DETECTED:") {
						t.Errorf("terminate answer %s; want LOOP_DETECTED in the API's own shape", answer)
					}
					continue
				}
				r := <-got
				if r.header.Get("x-api-key") != "sk-ant-test" || r.header.Get("anthropic-version") != "2023-06-01" {
					t.Errorf("auth headers not passed through: %v", r.header)
				}
				if st.text == "" {
					if r.body != body {
						t.Errorf("%d calls: upstream body changed without a loop", st.calls)
					}
					continue
				}
				if txt := tt.injected(r.body); !strings.Contains(txt, st.text) {
					t.Errorf("%d calls: upstream saw %q at the placement; want %q", st.calls, txt, st.text)
				}
			}
		})
	}
}

// TestOtherAPIsStreamCut cuts a degenerate Responses and Anthropic stream
// with each stream.tail: "keep" forwards everything until the detector was
// sure, "trim" ends the client's text where the repetition began; either way
// the stream ends in the API's own shape, and the Responses tail reports the
// text the client got.
func TestOtherAPIsStreamCut(t *testing.T) {
	const sentence = "I will now read the file to see the error. "
	responsesEvent := func(seq int, typ, rest string) string {
		return fmt.Sprintf("event: %s\ndata: {\"type\":%q,\"sequence_number\":%d%s}\n\n", typ, typ, seq, rest)
	}
	tests := []struct {
		name, path, body string
		head             string
		delta            func(i int) string
		wantEnd          []string
		textPath         string // where an event's data carries streamed text
	}{
		{"responses", "/v1/responses", responsesHistory(1, true),
			responsesEvent(0, "response.created", `,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"gpt-4.1","output":[]}`) +
				responsesEvent(1, "response.output_item.added", `,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}`) +
				responsesEvent(2, "response.content_part.added", `,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`),
			func(i int) string {
				return responsesEvent(3+i, "response.output_text.delta", `,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"`+sentence+`"`)
			},
			[]string{": loopguard cut category=token_degeneration", "response.completed"}, "delta"},
		{"anthropic", "/v1/messages", anthropicHistory(1, true),
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
			func(int) string {
				return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + sentence + "\"}}\n\n"
			},
			[]string{": loopguard cut category=token_degeneration", "event: content_block_stop", "event: message_delta", "event: message_stop"}, "delta.text"},
	}
	tails := []struct {
		tail                 string
		minCopies, maxCopies int
	}{
		{TailKeep, 8, 1000}, // everything forwarded until the detector was sure
		{TailTrim, 0, 1},    // cut where the repetition began
	}
	for _, tt := range tests {
		for _, tl := range tails {
			t.Run(tt.name+"/"+tl.tail, func(t *testing.T) {
				closed := make(chan int, 1)
				up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, tt.head)
					// Bounded by time, not by a count of events: loopback
					// socket buffers can take thousands of events before the
					// cut closes the connection, and a count would end the
					// stream first under load.
					deadline := time.Now().Add(10 * time.Second)
					for i := 0; time.Now().Before(deadline); i++ {
						if _, err := io.WriteString(w, tt.delta(i)); err != nil || r.Context().Err() != nil {
							closed <- i + 1
							return
						}
						w.(http.Flusher).Flush()
					}
					closed <- 0
				})
				_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Stream.Tail = tl.tail })
				req, _ := http.NewRequest("POST", base+tt.path, strings.NewReader(tt.body))
				resp, err := newClient().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				answer, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if sent := <-closed; sent == 0 {
					t.Errorf("the upstream sent everything; the cut did not close it")
				}
				last := -1
				for _, want := range tt.wantEnd {
					i := strings.LastIndex(string(answer), want)
					if i < 0 || i < last {
						t.Errorf("stream end lacks %q in order:\n%s", want, answer[max(0, len(answer)-1500):])
					}
					last = i
				}
				var text strings.Builder
				for _, ev := range strings.Split(string(answer), "\n\n") {
					if _, data, ok := strings.Cut(ev, "data: "); ok && strings.HasSuffix(gjson.Get(data, "type").String(), "delta") {
						text.WriteString(gjson.Get(data, tt.textPath).String())
					}
				}
				if n := strings.Count(text.String(), sentence); n < tl.minCopies || n > tl.maxCopies {
					t.Errorf("client got %d copies of the repeated sentence; want %d..%d", n, tl.minCopies, tl.maxCopies)
				}
				if tt.name == "responses" {
					_, completed, _ := strings.Cut(string(answer[strings.LastIndex(string(answer), "event: response.completed"):]), "data: ")
					if reported := gjson.Get(completed, "response.output.0.content.0.text").String(); reported != text.String() {
						t.Errorf("response.completed reports %d bytes of text; the client got %d", len(reported), text.Len())
					}
				}
			})
		}
	}
}

// TestResponsesPreviousResponseIDLoop: an agent that keeps its history on the
// server sends only its new function output each turn; loopguard's record of
// what went by shows the loop.
func TestResponsesPreviousResponseIDLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			n := 0
			up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				n++
				call := fmt.Sprintf(`{"id":"fc_%d","type":"function_call","status":"completed","call_id":"call_%d","name":"bash","arguments":"{\"command\":\"make build\"}"}`, n, n)
				resp := fmt.Sprintf(`{"id":"resp_%d","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[%s]}`, n, call)
				if !stream {
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, resp)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_%d\",\"object\":\"response\",\"created_at\":1,\"status\":\"in_progress\",\"model\":\"gpt-4.1\",\"output\":[]}}\n\n", n)
				fmt.Fprintf(w, "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"sequence_number\":1,\"output_index\":0,\"item\":%s}\n\n", call)
				fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":%s}\n\n", resp)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			prev := ""
			var actions []string
			for turn := 1; turn <= 6; turn++ {
				body := fmt.Sprintf(`{"model":"gpt-4.1","stream":%v,"input":"Fix the build."}`, stream)
				if prev != "" {
					body = fmt.Sprintf(`{"model":"gpt-4.1","stream":%v,"previous_response_id":%q,"input":[{"type":"function_call_output","call_id":"call_%d","output":"make: *** No rule to make target 'build'.  Stop."}]}`,
						stream, prev, turn-1)
				}
				req, _ := http.NewRequest("POST", base+"/v1/responses", strings.NewReader(body))
				resp, err := newClient().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.ReadAll(resp.Body)
				resp.Body.Close()
				actions = append(actions, resp.Header.Get(HeaderAction))
				if resp.Header.Get(HeaderAction) == "terminate" {
					break
				}
				<-got
				prev = fmt.Sprintf("resp_%d", n)
			}
			want := "none,none,none,warn,constrain,terminate"
			if strings.Join(actions, ",") != want {
				t.Errorf("actions = %v; want %s", actions, want)
			}
		})
	}
}
