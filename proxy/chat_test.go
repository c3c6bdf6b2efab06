package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// loopingHistory is a chat request whose agent ran the same failing command
// n times; each call has its own id, as real runs do.
func loopingHistory(n int, stream bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":"m","stream":%v,"messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"Fix the build."}`, stream)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"bash","arguments":"{\"command\":\"make build\"}"}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":"make: *** No rule to make target 'build'.  Stop.\nexit code 2"}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

const chatAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`

func postChat(t *testing.T, base, session, body string) (*http.Response, string) {
	t.Helper()
	return post(t, base+"/v1/chat/completions", session, body)
}

// post posts a JSON body, in session when not "", and returns the response
// and its whole body.
func post(t *testing.T, url, session, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Session-ID", session)
	}
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestChatLadderWarnConstrainTerminate(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswer)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })

	steps := []struct {
		calls      int
		wantAction string
		wantText   string // in the last message the upstream saw; "" for none
	}{
		{1, "none", ""},
		{3, "warn", "[loopguard]"},
		{4, "constrain", "<loop-recovery"},
		{5, "terminate", ""},
	}
	for _, st := range steps {
		body := loopingHistory(st.calls, false)
		resp, answer := postChat(t, base, "ladder-1", body)
		if a := resp.Header.Get(HeaderAction); a != st.wantAction {
			t.Fatalf("%d calls: %s = %q; want %q (body %s)", st.calls, HeaderAction, a, st.wantAction, answer)
		}
		if resp.Header.Get(HeaderSession) != "ladder-1" {
			t.Errorf("%s = %q; want the client's session id", HeaderSession, resp.Header.Get(HeaderSession))
		}
		if st.wantAction == "terminate" {
			content := gjson.Get(answer, "choices.0.message.content").String()
			if !strings.HasPrefix(content, "LOOP_DETECTED:") || resp.StatusCode != 200 || resp.Header.Get(HeaderLoop) == "" {
				t.Errorf("terminate answer = %d %s; want 200 with LOOP_DETECTED content and %s", resp.StatusCode, answer, HeaderLoop)
			}
			select {
			case r := <-got:
				t.Errorf("terminate called the upstream: %s", r.body)
			default:
			}
			continue
		}
		if answer != chatAnswer {
			t.Errorf("%d calls: client got %q; want the upstream's answer unchanged", st.calls, answer)
		}
		sent := (<-got).body
		if st.wantText == "" {
			if sent != body {
				t.Errorf("%d calls: upstream body changed with no loop:\n%s", st.calls, sent)
			}
			continue
		}
		msgs := gjson.Get(sent, "messages").Array()
		last := msgs[len(msgs)-1].Get("content").String()
		if !strings.Contains(last, st.wantText) {
			t.Errorf("%d calls: last upstream message = %q; want it to contain %q", st.calls, last, st.wantText)
		}
	}
}

func TestChatShadowModeChangesNothingButHeaders(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswer)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Policy.Mode = "shadow" })
	for n := 3; n <= 8; n++ {
		body := loopingHistory(n, false)
		resp, answer := postChat(t, base, "shadow-1", body)
		if sent := (<-got).body; sent != body || answer != chatAnswer {
			t.Fatalf("%d calls: shadow mode changed traffic", n)
		}
		if resp.Header.Get(HeaderAction) != "shadow" || resp.Header.Get(HeaderLoop) == "" {
			t.Errorf("%d calls: headers %v; want action shadow and the loop category", n, resp.Header)
		}
	}
}

func TestChatMalformedBodyPassesThrough(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		io.WriteString(w, `{"error":{"message":"bad json"}}`)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	for _, body := range []string{`{"messages":[`, `not json`, `{"messages":"nope"}`, `[]`} {
		resp, answer := postChat(t, base, "", body)
		if sent := (<-got).body; sent != body {
			t.Errorf("upstream got %q; want %q unchanged", sent, body)
		}
		if resp.StatusCode != 400 || answer != `{"error":{"message":"bad json"}}` {
			t.Errorf("client got %d %q; want the upstream's answer", resp.StatusCode, answer)
		}
	}
}

// degenerateSSE streams a text that repeats one sentence until the client
// goes away (at most 10 s), and reports how many events it had sent when the
// proxy closed the connection (0 if it never did).
func degenerateSSE(t *testing.T, closed chan<- int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(s string) string {
			return fmt.Sprintf(`data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", s)
		}
		io.WriteString(w, chunk("Let me check the configuration file again. "))
		deadline := time.Now().Add(10 * time.Second)
		for i := 1; time.Now().Before(deadline); i++ {
			if _, err := io.WriteString(w, chunk("I will now read the file to see the error. ")); err != nil {
				closed <- i
				return
			}
			w.(http.Flusher).Flush()
			if r.Context().Err() != nil {
				closed <- i
				return
			}
			if i%50 == 0 {
				time.Sleep(time.Millisecond) // a model's pace, roughly
			}
		}
		closed <- 0
	}
}

func TestChatStreamDegenerationIsCut(t *testing.T) {
	closed := make(chan int, 1)
	degenerate := degenerateSSE(t, closed)
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("then") == "" {
			degenerate(w, r)
			return
		}
		io.WriteString(w, chatAnswer)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	resp, answer := postChat(t, base, "cut-1", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if sent := <-closed; sent == 0 {
		t.Errorf("the upstream never saw its connection closed after the cut")
	}
	events := strings.Split(strings.TrimSuffix(answer, "\n\n"), "\n\n")
	n := len(events)
	if n < 4 || events[n-1] != "data: [DONE]" || !strings.HasPrefix(events[n-4], ": loopguard cut category=token_degeneration") {
		t.Fatalf("stream end = %q; want the cut comment, finish and usage chunks, [DONE]", events[max(0, n-4):])
	}
	finish := strings.TrimPrefix(events[n-3], "data: ")
	if gjson.Get(finish, "id").String() != "chatcmpl-9" || gjson.Get(finish, "created").Int() != 7 ||
		gjson.Get(finish, "choices.0.finish_reason").String() != "stop" {
		t.Errorf("final chunk = %s; want the stream's id, created and finish_reason stop", finish)
	}
	if u := gjson.Get(strings.TrimPrefix(events[n-2], "data: "), "usage.completion_tokens").Int(); u <= 0 {
		t.Errorf("usage chunk = %s; want estimated completion tokens", events[n-2])
	}

	<-got

	// The cut is counted, with its delay from the first degenerate byte,
	// once the answer has ended, which may be after the client read it.
	for _, want := range []string{
		`loopguard_streams_cut_total{category="token_degeneration"} 1`,
		"loopguard_cut_delay_seconds_count 1",
		`loopguard_requests_total{path="chat_completions",status="200",transport="http"} 1`,
	} {
		waitMetric(t, base, want)
	}

	// The next request of the session carries the degeneration notice.
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions?then=1", strings.NewReader(
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"I will now read"},{"role":"user","content":"go on"}]}`))
	req.Header.Set("X-Session-ID", "cut-1")
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sent := (<-got).body
	if last := gjson.Get(sent, "messages.@reverse.0.content").String(); !strings.Contains(last, "degenerated") {
		t.Errorf("next request's last message = %q; want the degeneration notice", last)
	}
}

// toolCallSSE streams one tool call, split over several chunks, after a
// content chunk.
func toolCallSSE(name, args string) string {
	head := `data: {"id":"chatcmpl-t","object":"chat.completion.chunk","created":3,"model":"m","choices":[{"index":0,`
	var b strings.Builder
	b.WriteString(head + `"delta":{"role":"assistant","content":"Trying again."},"finish_reason":null}]}` + "\n\n")
	fmt.Fprintf(&b, head+`"delta":{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":%q,"arguments":""}}]},"finish_reason":null}]}`+"\n\n", name)
	half := len(args) / 2
	for _, part := range []string{args[:half], args[half:]} {
		fmt.Fprintf(&b, head+`"delta":{"tool_calls":[{"index":0,"function":{"arguments":%q}}]},"finish_reason":null}]}`+"\n\n", part)
	}
	b.WriteString(head + `"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n")
	return b.String()
}

func TestChatHoldToolCallsReplacesTerminalCall(t *testing.T) {
	tests := []struct {
		name        string
		args        string
		wantReplace bool
	}{
		{"the looping call again", `{"command": "make build"}`, true},
		{"a different call", `{"command":"cat Makefile"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := toolCallSSE("bash", tt.args)
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, stream)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Stream.HoldToolCalls = true })
			var answer string
			for _, st := range []struct {
				calls int
				want  string
			}{{3, "warn"}, {4, "constrain"}} {
				var resp *http.Response
				resp, answer = postChat(t, base, "hold-"+tt.name, loopingHistory(st.calls, true))
				if a := resp.Header.Get(HeaderAction); a != st.want {
					t.Fatalf("%d calls: action %q; want %q", st.calls, a, st.want)
				}
			}
			replaced := strings.Contains(answer, "LOOP_DETECTED:")
			if replaced != tt.wantReplace {
				t.Fatalf("constrained stream = %q; replaced=%v, want %v", answer, replaced, tt.wantReplace)
			}
			if !tt.wantReplace {
				if answer != stream {
					t.Errorf("held stream changed:\n got %q\nwant %q", answer, stream)
				}
				return
			}
			if strings.Contains(answer, `"tool_calls"`) || !strings.HasSuffix(answer, "data: [DONE]\n\n") ||
				!strings.HasPrefix(answer, `data: {"id":"chatcmpl-t"`) {
				t.Errorf("replaced stream = %q; want the content chunk, no tool call, a stop chunk and [DONE]", answer)
			}
		})
	}
}

func TestChatCompressedAnswerIsInspected(t *testing.T) {
	// A degenerate answer, gzipped although loopguard asked for identity:
	// loopguard reads it decoded and cuts it, and the client gets the cut
	// answer gzipped as the upstream's was.
	var gz strings.Builder
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, `{"choices":[{"index":0,"message":{"role":"assistant","content":"`+strings.Repeat("I will check it again. ", 200)+`"},"finish_reason":"stop"}]}`)
	zw.Close()
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		io.WriteString(w, gz.String())
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("answer encoding %q; want the upstream's gzip", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the answer does not decode: %v", err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("the answer does not decode: %v", err)
	}
	if n := len(gjson.GetBytes(plain, "choices.0.message.content").String()); n == 0 || n >= 200*len("I will check it again. ") {
		t.Errorf("content is %d bytes; want the degenerate text cut", n)
	}
	if ae := (<-got).header.Get("Accept-Encoding"); ae != "identity" {
		t.Errorf("Accept-Encoding upstream = %q; want identity for an inspected request", ae)
	}
}

func TestChatStreamCutTail(t *testing.T) {
	const sentence = "I will now read the file to see the error. "
	tests := []struct {
		tail                 string
		minCopies, maxCopies int
	}{
		{TailKeep, 8, 1000}, // everything forwarded until the detector was sure
		{TailTrim, 0, 1},    // cut where the repetition began
	}
	for _, tt := range tests {
		t.Run(tt.tail, func(t *testing.T) {
			closed := make(chan int, 1)
			up, _ := upstreamRecorder(t, degenerateSSE(t, closed))
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Stream.Tail = tt.tail })
			_, answer := postChat(t, base, "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			<-closed
			var text strings.Builder
			for _, ev := range strings.Split(answer, "\n\n") {
				text.WriteString(gjson.Get(strings.TrimPrefix(ev, "data: "), "choices.0.delta.content").String())
			}
			if !strings.HasPrefix(text.String(), "Let me check the configuration file again. ") {
				t.Fatalf("client text = %q; want the healthy start kept", text.String())
			}
			n := strings.Count(text.String(), sentence)
			if n < tt.minCopies || n > tt.maxCopies || !strings.Contains(answer, ": loopguard cut category=") {
				t.Errorf("tail %s: client got %d copies of the repeated sentence; want %d..%d, and a cut", tt.tail, n, tt.minCopies, tt.maxCopies)
			}
		})
	}
}

// A body nested millions deep must not crash the proxy: recursive JSON
// validators overflow the goroutine stack, a fatal error recover cannot catch.
func TestDeeplyNestedBodiesPassThrough(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		io.WriteString(w, `{"error":{"message":"bad"}}`)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	deep := strings.Repeat("[", 8<<20)
	for _, body := range []string{deep, `{"messages":` + deep, `{"input":` + deep, `{"model":"m","messages":[{"role":"user","content":` + deep} {
		for _, path := range []string{"/v1/chat/completions", "/v1/responses", "/v1/messages"} {
			resp, err := newClient().Post(base+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 || len((<-got).body) != len(body) {
				t.Errorf("%s: status %d; want the upstream's 400 for the unchanged body", path, resp.StatusCode)
			}
		}
	}
}

func TestDeeplyNestedAnswersPassThrough(t *testing.T) {
	deep := strings.Repeat("[", 8<<20)
	for _, tc := range []struct{ name, contentType, body string }{
		{"stream", "text/event-stream", "data: {\"choices\":" + deep + "\n\ndata: [DONE]\n\n"},
		{"json", "application/json", `{"choices":` + deep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				io.WriteString(w, tc.body)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			resp, answer := postChat(t, base, "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != 200 || answer != tc.body {
				t.Errorf("status %d, %d bytes; want the upstream's %d bytes unchanged", resp.StatusCode, len(answer), len(tc.body))
			}
		})
	}
}
