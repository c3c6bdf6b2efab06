package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// geminiForm is one way a Gemini request is sent: Gemini's own API or
// Code Assist's wrapping, streamed or not, as SSE or as a JSON array.
type geminiForm struct {
	name                 string
	wrapped, stream, sse bool
}

var geminiForms = []geminiForm{
	{"gemini", false, false, false},
	{"gemini/stream-array", false, true, false},
	{"gemini/stream-sse", false, true, true},
	{"code-assist", true, false, false},
	{"code-assist/stream-array", true, true, false},
	{"code-assist/stream-sse", true, true, true},
}

// path is where a request of f goes, its query included.
func (f geminiForm) path() string {
	method := "generateContent"
	if f.stream {
		method = "streamGenerateContent"
	}
	p := "/v1beta/models/gemini-2.5-pro:" + method
	if f.wrapped {
		p = "/v1internal:" + method
	}
	if f.sse {
		p += "?alt=sse"
	}
	return p
}

// body wraps a Gemini request as f sends it.
func (f geminiForm) body(req string) string {
	if f.wrapped {
		return `{"model":"gemini-2.5-pro","project":"proj-1","user_prompt_id":"p1","request":` + req + `}`
	}
	return req
}

// request is the Gemini request in a body of f.
func (f geminiForm) request(body string) gjson.Result {
	if f.wrapped {
		return gjson.Get(body, "request")
	}
	return gjson.Parse(body)
}

// geminiLoopHistory is loopHistory's agent as Gemini CLI sends it: the
// same system prompt, task, calls (without ids) and results.
func geminiLoopHistory(n int) string {
	var b strings.Builder
	b.WriteString(`{"systemInstruction":{"role":"user","parts":[{"text":"You are an agent."}]},"contents":[{"role":"user","parts":[{"text":"Fix the build."}]}`)
	for i := 0; i < n; i++ {
		b.WriteString(`,{"role":"model","parts":[{"functionCall":{"name":"bash","args":{"command":"make build"}}}]}`)
		b.WriteString(`,{"role":"user","parts":[{"functionResponse":{"name":"bash","response":{"output":"make: *** No rule to make target 'build'.  Stop.\nexit code 2"}}}]}`)
	}
	b.WriteString(`],"tools":[{"functionDeclarations":[{"name":"bash","parameters":{"type":"object"}}]}],"generationConfig":{"temperature":0}}`)
	return b.String()
}

// geminiAnswers are the chunks of one healthy Gemini answer.
var geminiAnswers = []string{
	`{"candidates":[{"content":{"role":"model","parts":[{"text":"Done."}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"totalTokenCount":11},"modelVersion":"gemini-2.5-pro"}`,
}

// writeGemini answers chunks as f's upstream would.
func writeGemini(w http.ResponseWriter, f geminiForm, chunks []string) {
	if f.wrapped {
		for i, c := range chunks {
			chunks[i] = `{"response":` + c + `,"traceId":"t1"}`
		}
	}
	switch {
	case !f.stream:
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		io.WriteString(w, chunks[0])
	case f.sse:
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			io.WriteString(w, "data: "+c+"\r\n\r\n")
			w.(http.Flusher).Flush()
		}
	default:
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		for i, c := range chunks {
			sep := "\n,\r\n"
			if i == 0 {
				sep = "["
			}
			io.WriteString(w, sep+c)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "\n]")
	}
}

// geminiChunks returns the chunks of an answer of f, unwrapped.
func geminiChunks(t *testing.T, f geminiForm, body []byte) []gjson.Result {
	t.Helper()
	var out []gjson.Result
	add := func(c gjson.Result) {
		if f.wrapped {
			c = c.Get("response")
		}
		out = append(out, c)
	}
	switch {
	case !f.stream:
		add(gjson.ParseBytes(body))
	case f.sse:
		rd := sse.NewReader(bytes.NewReader(body), 0)
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			if ev.Data != nil {
				if !gjson.ValidBytes(ev.Data) {
					t.Fatalf("event data is not JSON: %q", ev.Data)
				}
				add(gjson.ParseBytes(ev.Data))
			}
		}
	default:
		var arr []json.RawMessage
		if err := json.Unmarshal(body, &arr); err != nil {
			t.Fatalf("the streamed array is not a JSON array: %v\n%s", err, body)
		}
		for _, e := range arr {
			add(gjson.ParseBytes(e))
		}
	}
	return out
}

// TestGeminiParity: the same looping history gets the same actions and the
// same rewritten content on Gemini, plain and Code Assist, streamed (SSE
// and JSON array) and not, as on chat completions: the warnings and
// recovery blocks a text part after the function responses, the collapse
// as many turns, and LOOP_DETECTED in Gemini's shape.
func TestGeminiParity(t *testing.T) {
	for _, f := range geminiForms {
		t.Run(f.name, func(t *testing.T) {
			up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/chat/completions") {
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
					return
				}
				writeGemini(w, f, append([]string(nil), geminiAnswers...))
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			for _, calls := range []int{1, 2, 3, 4, 5, 6} {
				var actions [2]string
				var seen [2]string
				for k, path := range []string{"/v1/chat/completions", f.path()} {
					body := loopHistory(calls, false, "")
					if k == 1 {
						body = f.body(geminiLoopHistory(calls))
					}
					req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
					req.Header.Set("X-Session-ID", fmt.Sprintf("parity-%s-%d", f.name, k))
					resp, err := newClient().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					answer, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					actions[k] = resp.Header.Get(HeaderAction)
					if actions[k] == "terminate" {
						if k == 1 {
							checkGeminiTerminate(t, f, resp.Header.Get("Content-Type"), answer)
						}
						continue
					}
					r := <-got
					if k == 0 {
						// Chat's system prompt is a message; Gemini's is not.
						seen[k] = fmt.Sprint(gjson.Get(r.body, "messages.#").Int()-1) + " turns, the last ends: " +
							lastNote(gjson.Get(r.body, "messages.@reverse.0.content").String())
						continue
					}
					if r.uri != f.path() {
						t.Errorf("upstream got %s; want %s", r.uri, f.path())
					}
					contents := f.request(r.body).Get("contents")
					// The collapse's note and the texts are parts of their own
					// after the function response, where chat appends them to
					// the tool message's content after a blank line.
					var texts []string
					contents.Get("@reverse.0.parts").ForEach(func(_, p gjson.Result) bool {
						if p.Get("text").Exists() {
							texts = append(texts, p.Get("text").String())
						}
						return true
					})
					seen[k] = fmt.Sprint(contents.Get("#").Int()) + " turns, the last ends: " + lastNote(strings.Join(texts, "\n\n"))
				}
				if actions[0] != actions[1] {
					t.Errorf("%d calls: chat %q, gemini %q", calls, actions[0], actions[1])
				}
				if seen[0] != seen[1] {
					t.Errorf("%d calls: the rewrite differs:\nchat   %q\ngemini %q", calls, seen[0], seen[1])
				}
				if calls == 6 && actions[1] != "terminate" {
					t.Errorf("6 calls: action %q; want terminate", actions[1])
				}
			}
		})
	}
}

// lastNote is what loopguard added to a message's text: from its marker on.
func lastNote(s string) string {
	if i := strings.Index(s, "[loopguard"); i >= 0 {
		return s[i:]
	}
	if i := strings.Index(s, "<loop-recovery"); i >= 0 {
		return s[i:]
	}
	return ""
}

func checkGeminiTerminate(t *testing.T, f geminiForm, ct string, answer []byte) {
	t.Helper()
	wantCT := "application/json"
	if f.stream && f.sse {
		wantCT = "text/event-stream"
	}
	if ct != wantCT {
		t.Errorf("terminate Content-Type %q; want %q", ct, wantCT)
	}
	chunks := geminiChunks(t, f, answer)
	if len(chunks) != 1 {
		t.Fatalf("terminate: %d chunks; want 1:\n%s", len(chunks), answer)
	}
	c := chunks[0].Get("candidates.0")
	if !strings.HasPrefix(c.Get("content.parts.0.text").String(), "LOOP_DETECTED:") || c.Get("content.role").String() != "model" ||
		c.Get("finishReason").String() != "STOP" {
		t.Errorf("terminate answer:\n%s", answer)
	}
}

// TestGeminiTransparent: healthy Gemini answers, streamed as SSE or as a
// JSON array, plain and Code Assist's, reach the client byte for byte.
func TestGeminiTransparent(t *testing.T) {
	for _, tt := range []struct {
		file string
		f    geminiForm
	}{
		{"stream.sse", geminiForms[2]},
		{"stream-array.json", geminiForms[1]},
		{"code-assist.sse", geminiForms[5]},
	} {
		t.Run(tt.file, func(t *testing.T) {
			want, err := os.ReadFile("../sse/testdata/gemini/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				ct := "application/json; charset=UTF-8"
				if tt.f.sse {
					ct = "text/event-stream"
				}
				w.Header().Set("Content-Type", ct)
				for _, piece := range bytes.SplitAfter(want, []byte("\n")) {
					w.Write(piece)
					w.(http.Flusher).Flush()
				}
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			resp, err := newClient().Post(base+tt.f.path(), "application/json", strings.NewReader(tt.f.body(geminiLoopHistory(1))))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Equal(got, want) || resp.Header.Get(HeaderAction) != "none" {
				t.Errorf("action %q, got\n%q\nwant\n%q", resp.Header.Get(HeaderAction), got, want)
			}
		})
	}
}

// TestGeminiStreamCut: a degenerate Gemini stream, SSE or JSON array,
// plain or Code Assist's, is cut: the upstream connection closes and the
// client's stream ends well-formed with a last chunk whose finishReason
// is STOP (and, in SSE, a comment naming the cut).
func TestGeminiStreamCut(t *testing.T) {
	const phrase = "I will now read the file to see the error. "
	for _, f := range geminiForms {
		if !f.stream {
			continue
		}
		for _, tail := range []string{TailKeep, TailTrim} {
			t.Run(f.name+"/"+tail, func(t *testing.T) {
				closed := make(chan int, 1)
				up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
					ct := "application/json; charset=UTF-8"
					if f.sse {
						ct = "text/event-stream"
					}
					w.Header().Set("Content-Type", ct)
					deadline := time.Now().Add(10 * time.Second)
					for i := 0; time.Now().Before(deadline); i++ {
						c := `{"candidates":[{"content":{"role":"model","parts":[{"text":"` + phrase + `"}]},"index":0}],"modelVersion":"gemini-2.5-flash"}`
						if f.wrapped {
							c = `{"response":` + c + `}`
						}
						switch {
						case f.sse:
							c = "data: " + c + "\r\n\r\n"
						case i == 0:
							c = "[" + c
						default:
							c = "\n,\r\n" + c
						}
						if _, err := io.WriteString(w, c); err != nil || r.Context().Err() != nil {
							closed <- i + 1
							return
						}
						w.(http.Flusher).Flush()
					}
					closed <- 0
				})
				_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Stream.Tail = tail })
				resp, err := newClient().Post(base+f.path(), "application/json", strings.NewReader(f.body(geminiLoopHistory(1))))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if sent := <-closed; sent == 0 {
					t.Errorf("the upstream sent everything; the cut did not close it")
				}
				chunks := geminiChunks(t, f, body)
				var text strings.Builder
				for _, c := range chunks {
					text.WriteString(c.Get("candidates.0.content.parts.0.text").String())
				}
				if c := strings.Count(text.String(), phrase); tail == TailKeep && c < 2 || tail == TailTrim && c > 1 {
					t.Errorf("client got %d copies of the repeated phrase with tail %s", c, tail)
				}
				last := chunks[len(chunks)-1]
				if last.Get("candidates.0.finishReason").String() != "STOP" || last.Get("modelVersion").String() != "gemini-2.5-flash" ||
					last.Get("candidates.0.finishMessage").String() != "loopguard cut category=token_degeneration" {
					t.Errorf("last of %d chunks: %s", len(chunks), last.Raw)
				}
				if f.sse && !bytes.Contains(body, []byte(": loopguard cut category=token_degeneration")) {
					t.Errorf("no cut comment in the SSE stream:\n%s", body)
				}
			})
		}
	}
}

// TestGeminiBodyCut: a degenerate non-streamed Gemini answer is cut where
// its repetition began, with finishReason STOP.
func TestGeminiBodyCut(t *testing.T) {
	text := strings.Repeat("I will now read the file to see the error. ", 60)
	for _, f := range []geminiForm{geminiForms[0], geminiForms[3]} {
		t.Run(f.name, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				writeGemini(w, f, []string{`{"candidates":[{"content":{"role":"model","parts":[{"text":` +
					string(mustJSON(t, text)) + `}]},"finishReason":"MAX_TOKENS","index":0}],"modelVersion":"gemini-2.5-pro"}`})
			})
			_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
			resp, err := newClient().Post(base+f.path(), "application/json", strings.NewReader(f.body(geminiLoopHistory(1))))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			c := geminiChunks(t, f, body)[0].Get("candidates.0")
			if got := c.Get("content.parts.0.text").String(); len(got) >= len(text) || c.Get("finishReason").String() != "STOP" {
				t.Errorf("answer of %d bytes (of %d), finishReason %s", len(got), len(text), c.Get("finishReason"))
			}
		})
	}
}

// TestGeminiKeyNotLogged: Gemini's API key, in x-goog-api-key or in the
// ?key= query, reaches the upstream and never the log.
func TestGeminiKeyNotLogged(t *testing.T) {
	const header, query = "AIzaSyHEADERSECRET", "AIzaSyQUERYSECRET"
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		writeGemini(w, geminiForms[2], append([]string(nil), geminiAnswers...))
	})
	cfg := DefaultConfig()
	cfg.Upstream.URL = up.URL
	cfg.Log.Level = "debug"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	srv, err := New(cfg, zerolog.New(&logs).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	for _, calls := range []int{1, 6} { // an answer relayed, and LOOP_DETECTED
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+geminiForms[2].path()+"&key="+query,
			strings.NewReader(geminiLoopHistory(calls)))
		req.Header.Set("x-goog-api-key", header)
		req.Header.Set("X-Session-ID", fmt.Sprintf("key-%d", calls))
		resp, err := newClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if calls == 1 {
			r := <-got
			if r.header.Get("x-goog-api-key") != header || !strings.Contains(r.uri, "key="+query) {
				t.Errorf("upstream got %s with key header %q; want both keys passed on", r.uri, r.header.Get("x-goog-api-key"))
			}
		}
	}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), header) || strings.Contains(sc.Text(), query) {
			t.Errorf("the log holds the API key: %s", sc.Text())
		}
	}
}

// TestGeminiCallHolder: with held tool calls, a functionCall the policy
// would end the loop on is replaced by LOOP_DETECTED, a text part with
// finishReason STOP, in the stream's framing: valid SSE, or a valid JSON
// array also when the call came in its first element with the opening
// bracket. Another call passes unchanged.
func TestGeminiCallHolder(t *testing.T) {
	p := testPipeline(t)
	text := `{"candidates":[{"content":{"role":"model","parts":[{"text":"Reading."}]},"index":0}],"modelVersion":"gemini-2.5-pro"}`
	call := `{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"bash","args":{"command":"cat Makefile"}}}]},"finishReason":"STOP","index":0}],"modelVersion":"gemini-2.5-pro"}`
	for _, f := range geminiForms {
		if !f.stream {
			continue
		}
		for _, first := range []bool{false, true} {
			chunks := []string{text, call}
			if first {
				chunks = []string{call}
			}
			rec := httptest.NewRecorder()
			writeGemini(rec, f, chunks)
			stream := rec.Body.String()
			for _, tt := range []struct {
				command     string
				wantReplace bool
			}{{"make build", false}, {"cat Makefile", true}} {
				t.Run(fmt.Sprintf("%s/first=%v/%s", f.name, first, tt.command), func(t *testing.T) {
					args := `{"command":"` + tt.command + `"}`
					key, _ := inspect.CallKey(nil, "bash", args)
					o := newAnswerObserver(p, &plan{api: geminiVariant(f), requestFacts: requestFacts{stream: true}}, nil)
					defer o.release()
					o.holdCalls([]terminalCall{{key: key, constraint: policy.Constraint{Category: inspect.ToolRepetition,
						Pattern: "p", Tool: "bash", Args: args, Brief: "bash " + tt.command}}})
					next := sse.NewReader(strings.NewReader(stream), 0).Next
					if !f.sse {
						next = sse.NewArrayReader(strings.NewReader(stream), 0).Next
					}
					got, stopped := observeEvents(o, next)
					if !tt.wantReplace {
						if stopped || got != stream {
							t.Fatalf("client got %q (stopped %v); want the upstream's stream unchanged", got, stopped)
						}
						return
					}
					if !stopped || strings.Contains(got, "functionCall") {
						t.Fatalf("client got %q (stopped %v); want LOOP_DETECTED in place of the call", got, stopped)
					}
					cs := geminiChunks(t, f, []byte(got))
					last := cs[len(cs)-1].Get("candidates.0")
					if !strings.HasPrefix(last.Get("content.parts.0.text").String(), "LOOP_DETECTED") || last.Get("finishReason").String() != "STOP" {
						t.Errorf("last chunk %s", last.Raw)
					}
				})
			}
		}
	}
}

// geminiVariant is the flow of a request of f.
func geminiVariant(f geminiForm) *wireAPI {
	r := wireapi.Match(strings.Split(f.path(), "?")[0])
	return wireAPIs[r.API.Index()].variant(r.Stream, f.sse)
}
