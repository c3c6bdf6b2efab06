package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// streamAPI is one guarded wire API as the stream matrix drives it.
type streamAPI struct {
	name, path string
	history    func(calls int, stream bool) string // a looping agent's request
	healthy    string                              // testdata/streams/<name>.sse
	// beforeEnd marks the event a stream cut short by the upstream stops
	// before: each leaves a tool call open (held by hold_tool_calls) and
	// text that tail = "trim" holds.
	beforeEnd string
	// callStart marks the event that opens the healthy stream's tool call.
	callStart string
	// degenerate is a stream whose text repeats one sentence.
	degenerate func(copies int) string
}

const repeatedSentence = "I will now read the file to see the error. "

func streamAPIs(t *testing.T) []streamAPI {
	read := func(name string) string {
		b, err := os.ReadFile("testdata/streams/" + name + ".sse")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	chatChunk := func(s string) string {
		return `data: {"id":"chatcmpl-d","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"` + s + `"},"finish_reason":null}]}` + "\n\n"
	}
	responsesDelta := func(seq int, s string) string {
		return fmt.Sprintf("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"item_id\":\"msg_d\",\"output_index\":0,\"content_index\":0,\"delta\":%q}\n\n", seq, s)
	}
	anthropicDelta := func(s string) string {
		return `event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + s + `"}}` + "\n\n"
	}
	return []streamAPI{
		{"chat", "/v1/chat/completions", loopingHistory, read("chat"), `"finish_reason":"tool_calls"`, `"tool_calls"`,
			func(copies int) string {
				var b strings.Builder
				b.WriteString(chatChunk("Let me check the configuration file again. "))
				for range copies {
					b.WriteString(chatChunk(repeatedSentence))
				}
				return b.String() + "data: [DONE]\n\n"
			}},
		{"responses", "/v1/responses", responsesHistory, read("responses"), "event: response.function_call_arguments.done", `"type":"function_call"`,
			func(copies int) string {
				var b strings.Builder
				b.WriteString("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_d\",\"object\":\"response\",\"created_at\":1,\"status\":\"in_progress\",\"model\":\"gpt-4.1\",\"output\":[]}}\n\n")
				b.WriteString("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_d\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n")
				b.WriteString("event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"sequence_number\":2,\"item_id\":\"msg_d\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}\n\n")
				b.WriteString(responsesDelta(3, "Let me check the configuration file again. "))
				for i := range copies {
					b.WriteString(responsesDelta(4+i, repeatedSentence))
				}
				return b.String()
			}},
		{"anthropic", "/v1/messages", anthropicHistory, read("anthropic"), `{"type":"content_block_stop","index":1}`, `"type":"tool_use"`,
			func(copies int) string {
				var b strings.Builder
				b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_d\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
				b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
				b.WriteString(anthropicDelta("Let me check the configuration file again. "))
				for range copies {
					b.WriteString(anthropicDelta(repeatedSentence))
				}
				return b.String()
			}},
	}
}

// streamEnding is how the fake upstream ends its stream.
type streamEnding int

const (
	endEOF   streamEnding = iota // the whole stream, then a clean end
	endReset                     // part of the stream, then a connection reset
	endIdle                      // part of the stream, then silence past upstream.idle_timeout
)

// serveStream writes body as an SSE answer and ends it as ending says.
func serveStream(w http.ResponseWriter, r *http.Request, body string, ending streamEnding) {
	serveCodedStream(nil, w, r, body, ending, "")
}

// serveCodedStream is serveStream with the answer coded enc ("" for none),
// flushed after the body as a gateway that compresses a stream flushes.
func serveCodedStream(t *testing.T, w http.ResponseWriter, r *http.Request, body string, ending streamEnding, enc string) {
	w.Header().Set("Content-Type", "text/event-stream")
	if enc == "" {
		io.WriteString(w, body)
	} else {
		w.Header().Set("Content-Encoding", enc)
		e := newFlushEncoder(t, enc, w)
		io.WriteString(e, body)
		if ending == endEOF {
			e.Close()
		} else {
			e.Flush()
		}
	}
	w.(http.Flusher).Flush()
	switch ending {
	case endReset:
		// Give the proxy time to read what was sent, then reset the
		// connection as a crashed server's kernel does (a plain close
		// reads as a clean end of a chunked body).
		time.Sleep(100 * time.Millisecond)
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	case endIdle:
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// TestStreamOptionsMatrix runs every stream option over every guarded API
// with healthy and degenerate streams and compares, byte for byte, what the
// client gets with what the upstream sent: a healthy stream arrives whole,
// however it ends (a clean end, a reset, an idle upstream: then followed by
// loopguard's error event); a degenerate one arrives up to the cut, then
// the cut's own ending. hold_tool_calls runs with a terminal call in play
// (the session is at constrain for `bash make build`), so a healthy call of
// another command is held until it completes, and the same stream calling
// `make build` again has that call replaced by LOOP_DETECTED in the API's
// own shape; trim yields to holding when both are set. An upstream that
// gzips its stream anyway gets the same, decoded (encoding_stream.go).
func TestStreamOptionsMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("every stream option on every API: skipped under -short")
	}
	options := []struct {
		name       string
		trim, hold bool
	}{
		{"default", false, false},
		{"trim", true, false},
		{"hold_tool_calls", false, true},
		{"trim+hold_tool_calls", true, true},
	}
	for _, api := range streamAPIs(t) {
		for _, opt := range options {
			for _, enc := range []string{"", "gzip"} {
				trims := opt.trim && !opt.hold
				cutAt := strings.Index(api.healthy, api.beforeEnd)
				if cutAt < 0 {
					t.Fatalf("%s: the healthy stream lacks %q", api.name, api.beforeEnd)
				}
				cutAt = strings.LastIndex(api.healthy[:cutAt], "\n\n") + 2 // the start of that event
				cases := []struct {
					name      string
					body      string
					ending    streamEnding
					wantError string // the code of loopguard's error event after the stream, "" for none
					degen     bool
					terminal  bool // the stream calls `make build`, the call the ladder would end
				}{
					{"healthy", api.healthy, endEOF, "", false, false},
					{"healthy_upstream_reset", api.healthy[:cutAt], endReset, "upstream_error", false, false},
					{"healthy_upstream_idle", api.healthy[:cutAt], endIdle, "upstream_timeout", false, false},
					{"degenerate", api.degenerate(1500), endEOF, "", true, false},
					{"terminal_call", strings.ReplaceAll(api.healthy, "cat Makefile", "make build"), endEOF, "", false, true},
				}
				for _, tc := range cases {
					name := api.name + "/" + opt.name + "/" + tc.name
					if enc != "" {
						name += "/" + enc
					}
					t.Run(name, func(t *testing.T) {
						up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
							if r.URL.Query().Get("warmup") != "" {
								serveStream(w, r, api.healthy, endEOF)
								return
							}
							serveCodedStream(t, w, r, tc.body, tc.ending, enc)
						})
						_, base := startProxy(t, func(c *Config) {
							c.Upstream.URL = up.URL
							// Only the idle case waits out the idle timeout. The
							// others run with one no stall of a loaded machine
							// reaches: a reset that comes 100ms after the last
							// bytes would otherwise race a short one, and read
							// as upstream_timeout when the handler is slow.
							c.Upstream.IdleTimeout = time.Minute
							if tc.ending == endIdle {
								c.Upstream.IdleTimeout = 300 * time.Millisecond
							}
							c.Stream.HoldToolCalls = opt.hold
							if opt.trim {
								c.Stream.Tail = TailTrim
							}
						})
						session := "matrix-" + api.name + "-" + opt.name + "-" + tc.name
						post(t, base+api.path+"?warmup=1", session, api.history(3, true))
						resp, got := post(t, base+api.path, session, api.history(4, true))
						if a := resp.Header.Get(HeaderAction); a != "constrain" {
							t.Fatalf("action %q; want constrain (a terminal call in play)", a)
						}
						switch {
						case tc.degen:
							checkCutStream(t, tc.body, got, trims)
						case tc.terminal && opt.hold:
							checkReplacedCall(t, tc.body, got, api.callStart)
						case tc.wantError != "":
							if !strings.HasPrefix(got, tc.body) {
								t.Fatalf("client got %d bytes, differing from the upstream's %d from byte %d on: %q",
									len(got), len(tc.body), diffAt(got, tc.body), got[diffAt(got, tc.body):])
							}
							rest := got[len(tc.body):]
							if !strings.HasPrefix(rest, `data: {"error":`) || !strings.Contains(rest, `"code":"`+tc.wantError+`"`) {
								t.Errorf("after the upstream's bytes: %q; want loopguard's %s error event", rest, tc.wantError)
							}
						default:
							if got != tc.body {
								t.Errorf("client got %d bytes, differing from the upstream's %d from byte %d on: %q",
									len(got), len(tc.body), diffAt(got, tc.body), got[diffAt(got, tc.body):])
							}
						}
						if ce := resp.Header.Get("Content-Encoding"); ce != "" {
							t.Errorf("client Content-Encoding %q; want none", ce)
						}
					})
				}
			}
		}
	}
}

// diffAt is the offset of the first byte where a and b differ.
func diffAt(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// checkReplacedCall checks a stream whose tool call was held and replaced:
// the upstream's events up to the one that opened the call, then no part
// of the call, and loopguard's LOOP_DETECTED ending, whose data lines are
// JSON.
func checkReplacedCall(t *testing.T, sent, got, callStart string) {
	t.Helper()
	start := strings.LastIndex(sent[:strings.Index(sent, callStart)], "\n\n") + 2
	if !strings.HasPrefix(got, sent[:start]) {
		t.Fatalf("client's stream before the call differs from the upstream's from byte %d on: %q", diffAt(got, sent), got)
	}
	tail := got[start:]
	if strings.Contains(tail, callStart) || !strings.Contains(tail, "LOOP_DETECTED:") {
		t.Errorf("after the upstream's events: %q; want LOOP_DETECTED in place of the call", tail)
	}
	for _, line := range strings.Split(tail, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if ok && data != "[DONE]" && !json.Valid([]byte(data)) {
			t.Errorf("replaced ending has a data line that is not JSON: %s", line)
		}
		if strings.Contains(line, `"tool_use"`) || strings.Contains(line, `"tool_calls"`) {
			t.Errorf("replaced ending tells the agent to run a call: %s", line)
		}
	}
}

// checkCutStream checks a cut degenerate stream: the upstream's events up to
// the cut (with trim, up to where the repetition began, the last of them
// possibly shortened), then the cut comment and loopguard's ending, whose
// data lines are JSON.
func checkCutStream(t *testing.T, sent, got string, trimmed bool) {
	t.Helper()
	i := strings.Index(got, ": loopguard cut category=token_degeneration")
	if i < 0 {
		t.Fatalf("client got %d bytes without a cut comment:\n%s", len(got), got[max(0, len(got)-1000):])
	}
	head, tail := got[:i], got[i:]
	if !strings.HasPrefix(sent, head) {
		// With trim the event the repetition starts in is shortened; every
		// event before it is the upstream's.
		j := strings.LastIndex(strings.TrimSuffix(head, "\n\n"), "\n\n") + 2
		if !trimmed || !strings.HasPrefix(sent, head[:j]) {
			t.Fatalf("client's stream before the cut is not the upstream's:\n%s", head)
		}
	} else if head != "" && !strings.HasSuffix(head, "\n\n") {
		t.Fatalf("client's stream before the cut ends mid-event: %q", head[max(0, len(head)-200):])
	}
	copies := strings.Count(head, repeatedSentence)
	if trimmed && copies > 1 || !trimmed && copies < 8 {
		t.Errorf("trim=%v: %d copies of the repeated sentence before the cut", trimmed, copies)
	}
	for _, line := range strings.Split(tail, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if ok && data != "[DONE]" && !json.Valid([]byte(data)) {
			t.Errorf("cut ending has a data line that is not JSON: %s", line)
		}
	}
}
