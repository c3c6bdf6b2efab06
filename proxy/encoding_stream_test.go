package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	brotli "github.com/molecule-man/go-brrr"
	"github.com/tidwall/gjson"
)

// flushEncoder is a real encoder of one content coding that flushes after
// each event, as a gateway that compresses a stream does.
type flushEncoder interface {
	io.WriteCloser
	Flush() error
}

func newFlushEncoder(t *testing.T, enc string, w io.Writer) flushEncoder {
	t.Helper()
	switch enc {
	case "gzip":
		return gzip.NewWriter(w)
	case "deflate":
		return zlib.NewWriter(w)
	case "zstd":
		e, err := zstd.NewWriter(w)
		if err != nil {
			t.Fatal(err)
		}
		return e
	case "br":
		e, err := brotli.NewWriter(w, 4)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	t.Fatalf("newFlushEncoder: unknown coding %q", enc)
	return nil
}

// codedStreamCase is one guarded API's stream as an endless upstream
// sends it: head, then delta(i) until the proxy closes the connection.
type codedStreamCase struct {
	name, path string
	history    func(int, bool) string
	healthy    string
	head       string
	delta      func(i int) string
	// wantEnd are the end's parts, in order, after the cut comment.
	wantEnd  []string
	textPath string // where a delta's data carries its text
}

func codedStreamCases(t *testing.T) []codedStreamCase {
	apis := streamAPIs(t)
	responsesEvent := func(seq int, typ, rest string) string {
		return fmt.Sprintf("event: %s\ndata: {\"type\":%q,\"sequence_number\":%d%s}\n\n", typ, typ, seq, rest)
	}
	return []codedStreamCase{
		{"chat", "/v1/chat/completions", loopingHistory, apis[0].healthy,
			`data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"Let me check the configuration file again. "},"finish_reason":null}]}` + "\n\n",
			func(int) string {
				return `data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"` + repeatedSentence + `"},"finish_reason":null}]}` + "\n\n"
			},
			[]string{`"finish_reason":"stop"`, "data: [DONE]\n\n"}, "choices.0.delta.content"},
		{"responses", "/v1/responses", responsesHistory, apis[1].healthy,
			responsesEvent(0, "response.created", `,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"gpt-4.1","output":[]}`) +
				responsesEvent(1, "response.output_item.added", `,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}`) +
				responsesEvent(2, "response.content_part.added", `,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`),
			func(i int) string {
				return responsesEvent(3+i, "response.output_text.delta", `,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"`+repeatedSentence+`"`)
			},
			[]string{"event: response.output_text.done", "event: response.completed"}, "delta"},
		{"anthropic", "/v1/messages", anthropicHistory, apis[2].healthy,
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
			func(int) string {
				return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + repeatedSentence + "\"}}\n\n"
			},
			[]string{"event: content_block_stop", "event: message_delta", "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"}, "delta.text"},
	}
}

// TestCodedStreamHealthy: a healthy stream the upstream compresses,
// flushing after each event, reaches the client decoded, byte for byte the
// upstream's events, without a Content-Encoding and with the upstream's
// other headers, on each guarded API and with each coding.
func TestCodedStreamHealthy(t *testing.T) {
	for _, c := range codedStreamCases(t) {
		for _, enc := range testCodings {
			t.Run(c.name+"/"+enc, func(t *testing.T) {
				up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					w.Header().Set("Content-Encoding", enc)
					w.Header().Set("X-Upstream", "kept")
					e := newFlushEncoder(t, enc, w)
					for _, ev := range strings.SplitAfter(c.healthy, "\n\n") {
						io.WriteString(e, ev)
						e.Flush()
						w.(http.Flusher).Flush()
					}
					e.Close()
				})
				_, base := startProxy(t, func(cfg *Config) { cfg.Upstream.URL = up.URL; cfg.Upstream.AnthropicURL = up.URL })
				resp, got := postCoded(t, base+c.path, "coded-healthy-"+c.name+enc, "", []byte(c.history(1, true)), true)
				if ce := resp.Header.Get("Content-Encoding"); ce != "" || resp.Header.Get("X-Upstream") != "kept" {
					t.Errorf("client headers %v; want the upstream's, without its Content-Encoding", resp.Header)
				}
				if string(got) != c.healthy {
					t.Fatalf("client got %d bytes, differing from the upstream's %d decoded from byte %d on", len(got), len(c.healthy), diffAt(string(got), c.healthy))
				}
			})
		}
	}
}

// TestCodedStreamCut: a degenerate stream the upstream compresses is
// decoded as it comes and cut, on each guarded API and with each coding:
// the upstream's connection is closed while it still streams, and the
// client's stream, uncoded, is the upstream's events up to an event
// boundary followed by the cut's end in the API's shape, reporting the text
// the client got.
func TestCodedStreamCut(t *testing.T) {
	for _, c := range codedStreamCases(t) {
		for _, enc := range testCodings {
			t.Run(c.name+"/"+enc, func(t *testing.T) {
				closed := make(chan int, 1)
				plain := make(chan string, 1)
				up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					w.Header().Set("Content-Encoding", enc)
					e := newFlushEncoder(t, enc, w)
					var sent strings.Builder
					send := func(s string) error {
						sent.WriteString(s)
						if _, err := io.WriteString(e, s); err != nil {
							return err
						}
						if err := e.Flush(); err != nil {
							return err
						}
						w.(http.Flusher).Flush()
						return r.Context().Err()
					}
					defer func() { plain <- sent.String() }()
					send(c.head)
					// Bounded by time: the stream never ends by itself, so
					// only a cut read as the events come ends it.
					deadline := time.Now().Add(10 * time.Second)
					for i := 0; time.Now().Before(deadline); i++ {
						if send(c.delta(i)) != nil {
							closed <- i + 1
							return
						}
					}
					closed <- 0
				})
				_, base := startProxy(t, func(cfg *Config) { cfg.Upstream.URL = up.URL; cfg.Upstream.AnthropicURL = up.URL })
				resp, got := postCoded(t, base+c.path, "coded-cut-"+c.name+enc, "", []byte(c.history(1, true)), true)
				if n := <-closed; n == 0 {
					t.Fatalf("the upstream streamed for 10 s; the cut did not close it")
				}
				upstream := <-plain
				if ce := resp.Header.Get("Content-Encoding"); ce != "" {
					t.Errorf("client Content-Encoding %q; want none (the stream is relayed decoded)", ce)
				}
				answer := string(got)
				at := strings.LastIndex(answer, ": loopguard cut category=token_degeneration")
				if at < 0 {
					t.Fatalf("decoded stream has no cut comment; it ends %q", answer[max(0, len(answer)-300):])
				}
				if !strings.HasPrefix(upstream, answer[:at]) || !strings.HasSuffix(answer[:at], "\n\n") {
					t.Errorf("before the cut, the client got other bytes than the upstream's events")
				}
				end, last, lastAt := answer[at:], 0, 0
				for _, want := range c.wantEnd {
					i := strings.Index(end[last:], want)
					if i < 0 {
						t.Fatalf("stream end lacks %q after the cut comment:\n%.300s", want, end)
					}
					lastAt, last = last+i, last+i+len(want)
				}
				if final := end[lastAt:]; strings.Count(final, "\n\n") != 1 || !strings.HasSuffix(final, "\n\n") {
					t.Errorf("stream ends %q; want it to end with the event %q", final, c.wantEnd[len(c.wantEnd)-1])
				}
				var text strings.Builder
				for _, ev := range strings.Split(answer[:at], "\n\n") {
					if _, data, ok := strings.Cut(ev, "data: "); ok {
						text.WriteString(gjson.Get(data, c.textPath).String())
					}
				}
				if n := strings.Count(text.String(), repeatedSentence); n < 2 {
					t.Errorf("client got %d copies of the repeated sentence; want the stream up to the cut", n)
				}
				if c.name == "responses" {
					_, completed, _ := strings.Cut(end[strings.LastIndex(end, "event: response.completed"):], "data: ")
					if reported := gjson.Get(completed, "response.output.0.content.0.text").String(); reported != text.String() {
						t.Errorf("response.completed reports %d bytes of text; the client got %d", len(reported), text.Len())
					}
				}
			})
		}
	}
}

// TestCodedStreamUnreadable: a stream whose bytes do not decode as its
// Content-Encoding says reaches the client as far as it decoded, then
// loopguard's in-band error event; one in a coding loopguard does not read
// passes byte for byte with its Content-Encoding, uninspected.
func TestCodedStreamUnreadable(t *testing.T) {
	healthy := codedStreamCases(t)[0].healthy
	first := healthy[:strings.Index(healthy, "\n\n")+2]
	var flushed bytes.Buffer
	e := newFlushEncoder(t, "gzip", &flushed)
	io.WriteString(e, first)
	e.Flush()
	cases := []struct {
		name, enc string
		body      []byte
		wantCE    string
		want      string // what the client gets before an error event
		wantError bool
	}{
		{"garbage_after_first_event", "gzip", append(flushed.Bytes(), "\x00\xffnot deflate at all"...), "", first, true},
		{"not_gzip", "gzip", []byte(healthy), "", "", true},
		{"unknown_coding", "compress", []byte("\x1f\x9d coded as compress"), "compress", "\x1f\x9d coded as compress", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Content-Encoding", tc.enc)
				w.Write(tc.body)
			})
			_, base := startProxy(t, func(cfg *Config) { cfg.Upstream.URL = up.URL })
			resp, got := postCoded(t, base+"/v1/chat/completions", "coded-unreadable-"+tc.name, "", []byte(loopingHistory(1, true)), true)
			if ce := resp.Header.Get("Content-Encoding"); ce != tc.wantCE {
				t.Errorf("client Content-Encoding %q; want %q", ce, tc.wantCE)
			}
			if !strings.HasPrefix(string(got), tc.want) {
				t.Fatalf("client got %q; want it to begin %q", got, tc.want)
			}
			rest := string(got[len(tc.want):])
			if tc.wantError != (strings.HasPrefix(rest, `data: {"error":`) && strings.Contains(rest, `"code":"upstream_error"`)) {
				t.Errorf("after the decoded events: %q; want loopguard's error event: %v", rest, tc.wantError)
			}
		})
	}
}
