package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/ndjson"
	"github.com/loopguard/loopguard/policy"
	"github.com/tidwall/gjson"
)

// loopHistory is an agent that ran the same failing command n times, as
// chat completions sends it (ollama false) or as Ollama's /api/chat does:
// arguments as an object, results named by tool_name. stream is the
// request's stream member, "" for none.
func loopHistory(n int, ollama bool, stream string) string {
	var b strings.Builder
	b.WriteString(`{"model":"qwen3"`)
	if stream != "" {
		b.WriteString(`,"stream":` + stream)
	}
	b.WriteString(`,"messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"Fix the build."}`)
	for i := 0; i < n; i++ {
		if ollama {
			b.WriteString(`,{"role":"assistant","content":"","tool_calls":[{"function":{"name":"bash","arguments":{"command":"make build"}}}]}`)
			b.WriteString(`,{"role":"tool","tool_name":"bash","content":"make: *** No rule to make target 'build'.  Stop.\nexit code 2"}`)
			continue
		}
		fmt.Fprintf(&b, `,{"role":"assistant","content":"","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"bash","arguments":"{\"command\":\"make build\"}"}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":"make: *** No rule to make target 'build'.  Stop.\nexit code 2"}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestOllamaChatParity: the same looping history gets the same actions on
// /api/chat as on /v1/chat/completions, the warnings land in the last
// message alike, and LOOP_DETECTED comes in Ollama's own shape: NDJSON
// when the request has no stream member (Ollama streams by default), one
// object with "stream": false.
func TestOllamaChatParity(t *testing.T) {
	for _, stream := range []string{"false", ""} {
		t.Run("stream="+stream, func(t *testing.T) {
			up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"model":"qwen3","created_at":"2026-11-27T12:00:00Z","message":{"role":"assistant","content":"ok"},"done":true,"done_reason":"stop"}`)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			for _, calls := range []int{1, 2, 3, 4, 5, 6} {
				var actions [2]string
				var seen [2]string
				for k, api := range []struct {
					path   string
					ollama bool
				}{{"/v1/chat/completions", false}, {"/api/chat", true}} {
					req, _ := http.NewRequest("POST", base+api.path, strings.NewReader(loopHistory(calls, api.ollama, stream)))
					req.Header.Set("X-Session-ID", fmt.Sprintf("parity-%s-%d", stream, k))
					resp, err := newClient().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					answer, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					actions[k] = resp.Header.Get(HeaderAction)
					if actions[k] == "terminate" {
						if api.ollama {
							checkOllamaTerminate(t, stream, resp.Header.Get("Content-Type"), answer)
						}
						continue
					}
					r := <-got
					// The collapse (reset) leaves as many messages in both.
					seen[k] = gjson.Get(r.body, "messages.#").String() + " messages, the last: " + gjson.Get(r.body, "messages.@reverse.0.content").String()
				}
				if actions[0] != actions[1] {
					t.Errorf("%d calls: chat %q, ollama %q", calls, actions[0], actions[1])
				}
				if seen[0] != seen[1] {
					t.Errorf("%d calls: the last message differs:\nchat   %q\nollama %q", calls, seen[0], seen[1])
				}
				if calls == 6 && actions[1] != "terminate" {
					t.Errorf("6 calls: action %q; want terminate", actions[1])
				}
			}
		})
	}
}

func checkOllamaTerminate(t *testing.T, stream, ct string, answer []byte) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(answer), "\n"), "\n")
	wantCT, wantLines := "application/x-ndjson", 2
	if stream == "false" {
		wantCT, wantLines = "application/json", 1
	}
	if ct != wantCT || len(lines) != wantLines {
		t.Fatalf("terminate: %s, %d lines; want %s, %d:\n%s", ct, len(lines), wantCT, wantLines, answer)
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(gjson.Get(lines[0], "message.content").String(), "LOOP_DETECTED:") ||
		!gjson.Get(last, "done").Bool() || gjson.Get(last, "done_reason").String() != "stop" || gjson.Get(last, "model").String() != "qwen3" {
		t.Errorf("terminate answer:\n%s", answer)
	}
}

// TestOllamaTransparent: healthy native answers, streamed and not, with
// tool calls, reach the client byte for byte.
func TestOllamaTransparent(t *testing.T) {
	for _, tt := range []struct{ file, ct string }{
		{"ollama-chat-text.ndjson", "application/x-ndjson"},
		{"ollama-chat-tools.ndjson", "application/x-ndjson"},
		{"ollama-chat-tools.ndjson", "application/json; charset=utf-8"}, // a non-streamed answer is one object; the bytes are the test
	} {
		t.Run(tt.file+"/"+tt.ct, func(t *testing.T) {
			want, err := os.ReadFile("testdata/ollama/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ct)
				for _, l := range strings.SplitAfter(string(want), "\n") {
					io.WriteString(w, l)
					w.(http.Flusher).Flush()
				}
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			resp, err := newClient().Post(base+"/api/chat", "application/json", strings.NewReader(loopHistory(1, true, "")))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(got) != string(want) || resp.Header.Get(HeaderAction) != "none" {
				t.Errorf("action %q, got\n%s\nwant\n%s", resp.Header.Get(HeaderAction), got, want)
			}
		})
	}
}

// TestOllamaStreamCut: a degenerate NDJSON stream on /api/chat and
// /api/generate is cut: the upstream connection closes and the client's
// last line is a well-formed final one naming the cut. A stream the
// upstream compressed is cut alike, decoded (encoding_stream.go).
func TestOllamaStreamCut(t *testing.T) {
	const phrase = "I will now read the file to see the error. "
	for _, tt := range []struct{ path, body, field, tail, enc string }{
		{"/api/chat", loopHistory(1, true, ""), `"message":{"role":"assistant","content":%q}`, TailKeep, ""},
		{"/api/chat", loopHistory(1, true, ""), `"message":{"role":"assistant","content":%q}`, TailTrim, ""},
		{"/api/chat", loopHistory(1, true, ""), `"message":{"role":"assistant","content":%q}`, TailTrim, "zstd"},
		{"/api/generate", `{"model":"tiny","prompt":"hi"}`, `"response":%q`, TailKeep, ""},
		{"/api/generate", `{"model":"tiny","prompt":"hi"}`, `"response":%q`, TailTrim, ""},
		{"/api/generate", `{"model":"tiny","prompt":"hi"}`, `"response":%q`, TailKeep, "gzip"},
	} {
		t.Run(tt.path+"/"+tt.tail+"/"+tt.enc, func(t *testing.T) {
			closed := make(chan int, 1)
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-ndjson")
				var dst io.Writer = w
				flush := func() {}
				if tt.enc != "" {
					w.Header().Set("Content-Encoding", tt.enc)
					e := newFlushEncoder(t, tt.enc, w)
					dst, flush = e, func() { e.Flush() }
				}
				deadline := time.Now().Add(10 * time.Second)
				for i := 0; time.Now().Before(deadline); i++ {
					line := `{"model":"tiny","created_at":"2026-11-27T12:00:00Z",` + fmt.Sprintf(tt.field, phrase) + `,"done":false}` + "\n"
					if _, err := io.WriteString(dst, line); err != nil || r.Context().Err() != nil {
						closed <- i + 1
						return
					}
					flush()
					w.(http.Flusher).Flush()
				}
				closed <- 0
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Stream.Tail = tt.tail })
			resp, err := newClient().Post(base+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			var last string
			var text strings.Builder
			n := 0
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if !gjson.Valid(sc.Text()) {
					t.Fatalf("line %d is not JSON: %q", n, sc.Text())
				}
				last = sc.Text()
				text.WriteString(gjson.Get(last, "message.content").String() + gjson.Get(last, "response").String())
				n++
			}
			// keep forwards everything until the detector was sure; trim
			// ends the client's text where the repetition began.
			if c := strings.Count(text.String(), phrase); tt.tail == TailKeep && c < 2 || tt.tail == TailTrim && c > 1 {
				t.Errorf("client got %d copies of the repeated phrase with tail %s", c, tt.tail)
			}
			resp.Body.Close()
			if ce := resp.Header.Get("Content-Encoding"); ce != "" {
				t.Errorf("client Content-Encoding %q; want none (the stream is relayed decoded)", ce)
			}
			if sent := <-closed; sent == 0 {
				t.Errorf("the upstream sent everything; the cut did not close it")
			}
			if !gjson.Get(last, "done").Bool() || gjson.Get(last, "done_reason").String() != "loopguard_cut" ||
				gjson.Get(last, "loopguard_cut.category").String() != "token_degeneration" || gjson.Get(last, "model").String() != "tiny" {
				t.Errorf("last of %d lines: %s", n, last)
			}
		})
	}
}

// TestOllamaSessions: /api/chat sessions are named as on the other APIs:
// by the /s/<id>/ prefix, by a header, or derived from the conversation's
// opening, the same for each turn of one conversation.
func TestOllamaSessions(t *testing.T) {
	up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"qwen3","message":{"role":"assistant","content":"ok"},"done":true}`)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	session := func(path string, hdr map[string]string, body string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := newClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get(HeaderSession)
	}
	if got := session("/s/run-7/api/chat", nil, loopHistory(1, true, "false")); got != "run-7" {
		t.Errorf("/s/run-7/api/chat: session %q", got)
	}
	if got := session("/api/chat", map[string]string{"X-Session-ID": "hdr-1"}, loopHistory(1, true, "false")); got != "hdr-1" {
		t.Errorf("header: session %q", got)
	}
	first, second := session("/api/chat", nil, loopHistory(1, true, "false")), session("/api/chat", nil, loopHistory(2, true, "false"))
	if first == "" || first != second {
		t.Errorf("derived sessions %q then %q; want one, the same", first, second)
	}
}

// observeLines feeds an NDJSON stream to o line by line, as the relay
// does, and returns what the client gets and whether o stopped it.
func observeLines(t *testing.T, o *answerObserver, stream string) (string, bool) {
	t.Helper()
	return observeEvents(o, ndjson.NewReader(strings.NewReader(stream), 0).Next)
}

// TestOllamaCallHolder: with held tool calls, a call the policy would end
// the loop on is replaced by LOOP_DETECTED in Ollama's lines; another
// passes unchanged.
func TestOllamaCallHolder(t *testing.T) {
	p := testPipeline(t)
	const stream = `{"model":"qwen3","created_at":"2026-11-27T12:00:00Z","message":{"role":"assistant","content":"Reading."},"done":false}` + "\n" +
		`{"model":"qwen3","created_at":"2026-11-27T12:00:01Z","message":{"role":"assistant","content":"","tool_calls":[{"id":"call_1","function":{"index":0,"name":"bash","arguments":{"command":"cat Makefile"}}}]},"done":false}` + "\n" +
		`{"model":"qwen3","created_at":"2026-11-27T12:00:02Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","eval_count":9}` + "\n"
	for _, tt := range []struct {
		name, command string
		wantReplace   bool
	}{
		{"another call is terminal", "make build", false},
		{"the stream's call is terminal", "cat Makefile", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := `{"command":"` + tt.command + `"}`
			key, _ := inspect.CallKey(nil, "bash", args)
			o := newAnswerObserver(p, &plan{api: ollamaAPI, requestFacts: requestFacts{stream: true, model: "qwen3"}}, nil)
			defer o.release()
			o.holdCalls([]terminalCall{{key: key, constraint: policy.Constraint{Category: inspect.ToolRepetition,
				Pattern: "p", Tool: "bash", Args: args, Brief: "bash " + tt.command}}})
			got, stopped := observeLines(t, o, stream)
			if !tt.wantReplace {
				if stopped || got != stream {
					t.Fatalf("client got %q (stopped %v); want the upstream's stream unchanged", got, stopped)
				}
				return
			}
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			last := lines[len(lines)-1]
			if !stopped || strings.Contains(got, "tool_calls") || !strings.Contains(got, "LOOP_DETECTED") ||
				!gjson.Get(last, "done").Bool() || gjson.Get(last, "model").String() != "qwen3" {
				t.Errorf("client got %q; want LOOP_DETECTED lines in place of the call", got)
			}
			for i, l := range lines {
				if !gjson.Valid(l) {
					t.Errorf("line %d is not JSON: %q", i, l)
				}
			}
		})
	}
}

// TestOllamaBodyCut: a degenerate non-streamed answer is cut where its
// repetition began, its done_reason naming the cut.
func TestOllamaBodyCut(t *testing.T) {
	text := strings.Repeat("I will now read the file to see the error. ", 200)
	for _, tt := range []struct{ path, body, answer, field string }{
		{"/api/chat", loopHistory(1, true, "false"), `{"model":"tiny","created_at":"2026-11-27T12:00:00Z","message":{"role":"assistant","content":%q},"done":true,"done_reason":"length"}`, "message.content"},
		{"/api/generate", `{"model":"tiny","prompt":"hi","stream":false}`, `{"model":"tiny","created_at":"2026-11-27T12:00:00Z","response":%q,"done":true,"done_reason":"length"}`, "response"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				fmt.Fprintf(w, tt.answer, text)
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			resp, err := newClient().Post(base+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if c := gjson.GetBytes(got, tt.field).String(); len(c) >= len(text) || gjson.GetBytes(got, "done_reason").String() != "loopguard_cut" {
				t.Errorf("%d of %d bytes of text kept, done_reason %q", len(c), len(text), gjson.GetBytes(got, "done_reason"))
			}
		})
	}
}
