package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// testCodings are the content codings a client may send, each written and
// read by a library other than the proxy's own code path where one exists
// (the standard library's gzip and zlib), so a test does not check the
// proxy against itself.
var testCodings = []string{"zstd", "gzip", "deflate", "br"}

// encodeAs codes b with the Content-Encoding list enc, in order.
func encodeAs(t testing.TB, enc string, b []byte) []byte {
	t.Helper()
	for _, c := range strings.Split(enc, ",") {
		var out bytes.Buffer
		switch strings.TrimSpace(c) {
		case "gzip":
			w := gzip.NewWriter(&out)
			w.Write(b)
			w.Close()
		case "deflate":
			w := zlib.NewWriter(&out)
			w.Write(b)
			w.Close()
		case "zstd":
			w, _ := zstd.NewWriter(&out)
			w.Write(b)
			w.Close()
		case "br":
			out.Write(fasthttp.AppendBrotliBytes(nil, b))
		case "", "identity":
			out.Write(b)
		default:
			t.Fatalf("encodeAs: unknown coding %q", c)
		}
		b = out.Bytes()
	}
	return b
}

// decodeAs undoes encodeAs.
func decodeAs(t testing.TB, enc string, b []byte) []byte {
	t.Helper()
	list := strings.Split(enc, ",")
	for i := len(list) - 1; i >= 0; i-- {
		var r io.Reader
		var err error
		switch strings.TrimSpace(list[i]) {
		case "gzip":
			r, err = gzip.NewReader(bytes.NewReader(b))
		case "deflate":
			r, err = zlib.NewReader(bytes.NewReader(b))
		case "zstd":
			var d *zstd.Decoder
			d, err = zstd.NewReader(bytes.NewReader(b))
			if err == nil {
				defer d.Close()
				r = d
			}
		case "br":
			b, err = fasthttp.AppendUnbrotliBytes(nil, b)
			if err != nil {
				t.Fatalf("decodeAs br: %v", err)
			}
			continue
		case "", "identity":
			continue
		}
		if err != nil {
			t.Fatalf("decodeAs %s: %v", list[i], err)
		}
		if b, err = io.ReadAll(r); err != nil {
			t.Fatalf("decodeAs %s: %v", list[i], err)
		}
	}
	return b
}

func TestCodingsRoundTrip(t *testing.T) {
	body := []byte(responsesHistory(20, true))
	for _, enc := range append(testCodings, "gzip, zstd", "br,deflate", "identity, gzip", "x-gzip") {
		t.Run(enc, func(t *testing.T) {
			cs, err := parseCodings([]byte(enc))
			if err != nil {
				t.Fatalf("parseCodings(%q) = %v", enc, err)
			}
			wireEnc := strings.ReplaceAll(enc, "x-gzip", "gzip")
			got, err := cs.decode(nil, encodeAs(t, wireEnc, body), 0)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("decode(encodeAs(%q)) = %d bytes, %v; want the body", enc, len(got), err)
			}
			if got := decodeAs(t, wireEnc, cs.encode(nil, body)); !bytes.Equal(got, body) {
				t.Fatalf("decodeAs(encode(%q)) differs from the body", enc)
			}
		})
	}
	for _, bad := range []string{"compress", "gzip, snappy", "zstd,zstd,zstd,zstd,zstd"} {
		if _, err := parseCodings([]byte(bad)); err == nil {
			t.Errorf("parseCodings(%q) = nil error; want one", bad)
		}
	}
}

func TestCodingsDecodeWithinLimit(t *testing.T) {
	bomb := make([]byte, 8<<20) // zeros: kilobytes coded
	for _, enc := range testCodings {
		t.Run(enc, func(t *testing.T) {
			coded := encodeAs(t, enc, bomb)
			cs, _ := parseCodings([]byte(enc))
			got, err := cs.decode(nil, coded, 1<<20)
			if err != errDecodedTooLarge {
				t.Fatalf("decode(%d bytes of %s) = %v; want errDecodedTooLarge", len(coded), enc, err)
			}
			if cap(got) > 2<<20 {
				t.Errorf("decode held %d bytes; want no more than about the limit", cap(got))
			}
		})
	}
}

// guardedCase is one guarded API with its looping history and a minimal
// answer of its own shape.
type guardedCase struct {
	name, path string
	history    func(n int, stream bool) string
	answer     string // non-streamed
	stream     string // streamed
}

var guardedCases = []guardedCase{
	{"chat", "/v1/chat/completions", loopingHistory, chatAnswer,
		"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"},
	{"responses", "/v1/responses", responsesHistory,
		`{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}]}`,
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"ok\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[]}}\n\n"},
	{"anthropic", "/v1/messages", anthropicHistory,
		`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn"}`,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
}

// guardedUpstream answers each guarded API in its own shape, streamed when
// the request asked for a stream, and records what it got.
func guardedUpstream(t *testing.T, c guardedCase) (string, <-chan recorded) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, c.stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, c.answer)
	})
	return up.URL, got
}

// postCoded posts body coded with enc (none when "") to url in session.
func postCoded(t *testing.T, url, session, enc string, body []byte, stream bool) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	req.Header.Set("anthropic-version", "2023-06-01")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	if enc != "" {
		req.Header.Set("Content-Encoding", enc)
	}
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// turnResult is what one turn of a session came to: the action, and the
// body the upstream got, decoded ("" when loopguard answered itself).
type turnResult struct {
	action   string
	upstream string
}

// TestCodedRequestsGetSameActions runs the same looping sessions plain and
// coded with each coding, on each guarded API, streamed and not: every turn
// gets the same action, and the upstream gets the same rewrite (coded as the
// client coded it) or the client's own bytes when nothing was rewritten.
func TestCodedRequestsGetSameActions(t *testing.T) {
	turns := []int{1, 3, 4, 5}
	for _, c := range guardedCases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", c.name, stream), func(t *testing.T) {
				upURL, got := guardedUpstream(t, c)
				_, base := startProxy(t, func(cfg *Config) {
					cfg.Upstream.URL = upURL
					cfg.Upstream.AnthropicURL = upURL
				})
				run := func(enc string) []turnResult {
					var out []turnResult
					session := fmt.Sprintf("coded-%s-%v-%s", c.name, stream, enc)
					for _, n := range turns {
						plain := []byte(c.history(n, stream))
						sent := encodeAs(t, enc, plain)
						resp, answer := postCoded(t, base+c.path, session, enc, sent, stream)
						r := turnResult{action: resp.Header.Get(HeaderAction)}
						if resp.StatusCode != http.StatusOK {
							t.Fatalf("%s turn %d: status %d: %s", enc, n, resp.StatusCode, answer)
						}
						if r.action != "terminate" {
							rec := <-got
							if ce := rec.header.Get("Content-Encoding"); ce != enc {
								t.Fatalf("%s turn %d: upstream Content-Encoding %q; want %q", enc, n, ce, enc)
							}
							if r.action == "none" && rec.body != string(sent) {
								t.Errorf("%s turn %d: upstream got other bytes than the client sent", enc, n)
							}
							r.upstream = string(decodeAs(t, enc, []byte(rec.body)))
						}
						out = append(out, r)
					}
					return out
				}
				want := run("")
				if want[1].action != "warn" || want[3].action != "terminate" {
					t.Fatalf("plain session actions %v; want warn on turn 2 and terminate on turn 4", want)
				}
				for _, enc := range testCodings {
					gotTurns := run(enc)
					for i := range want {
						if gotTurns[i].action != want[i].action {
							t.Errorf("%s turn %d: action %q; plain got %q", enc, turns[i], gotTurns[i].action, want[i].action)
						}
						if gotTurns[i].upstream != want[i].upstream {
							t.Errorf("%s turn %d: upstream body (decoded) differs from the plain session's:\n%.300s\nwant\n%.300s",
								enc, turns[i], gotTurns[i].upstream, want[i].upstream)
						}
					}
				}
			})
		}
	}
}

// TestCodedRequestOverLimit: a small body that decodes past the body limit
// gets the oversize answer, and the upstream is not called.
func TestCodedRequestOverLimit(t *testing.T) {
	called := make(chan struct{}, 8)
	up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) { called <- struct{}{} })
	_, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = up.URL
		c.Server.MaxBodyBytes = 1 << 20
	})
	// A valid history padded with spaces to 16 MiB: kilobytes coded.
	plain := []byte(loopingHistory(3, false))
	plain = append(plain[:len(plain)-1], bytes.Repeat([]byte(" "), 16<<20)...)
	plain = append(plain, '}')
	for _, enc := range testCodings {
		sent := encodeAs(t, enc, plain)
		if len(sent) > 1<<20 {
			t.Fatalf("%s: %d bytes coded; the test wants a small body", enc, len(sent))
		}
		resp, answer := postCoded(t, base+"/v1/chat/completions", "bomb", enc, sent, false)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(answer, []byte("request_too_large")) {
			t.Errorf("%s bomb: status %d %s; want 413 request_too_large", enc, resp.StatusCode, answer)
		}
	}
	select {
	case <-called:
		t.Error("the upstream was called for a body over the limit")
	default:
	}
}

// TestUndecodableRequestPassesThrough: a body that does not decode as its
// Content-Encoding says (or names a coding loopguard does not know) reaches
// the upstream unchanged, and is counted as a fail-open.
func TestUndecodableRequestPassesThrough(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"cannot decode"}}`)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	looping := encodeAs(t, "gzip", []byte(loopingHistory(6, false)))
	tests := []struct {
		name, enc string
		body      []byte
	}{
		{"truncated gzip", "gzip", looping[:len(looping)/2]},
		{"unknown coding", "compress", []byte("\x1f\x9d\x90garbage")},
	}
	for _, tt := range tests {
		resp, answer := postCoded(t, base+"/v1/chat/completions", "undecodable", tt.enc, tt.body, false)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d %s; want the upstream's 400", tt.name, resp.StatusCode, answer)
		}
		rec := <-got
		if rec.body != string(tt.body) || rec.header.Get("Content-Encoding") != tt.enc {
			t.Errorf("%s: upstream got %d bytes coded %q; want the client's %d bytes coded %q",
				tt.name, len(rec.body), rec.header.Get("Content-Encoding"), len(tt.body), tt.enc)
		}
	}
	mresp, err := newClient().Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if want := `loopguard_fail_open_total{stage="undecodable_body"} 2`; !bytes.Contains(m, []byte(want)) {
		t.Errorf("/metrics lacks %q", want)
	}
}

// TestCodedAnswers: an upstream that codes its answer although loopguard
// asked for identity. A healthy non-streamed answer reaches the client byte
// for byte with its headers, and a streamed one decoded, without its
// Content-Encoding (encoding_stream.go); a degenerate non-streamed one is
// inspected decoded and cut, and the client gets the cut answer coded the
// same way.
func TestCodedAnswers(t *testing.T) {
	raw, err := os.ReadFile("../inspect/testdata/stream/loop_penalty_deploy_steps_1_1.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, loop, _ := bytes.Cut(raw, []byte("\n\n"))
	text, _ := json.Marshal(string(loop))
	degenerate := `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` +
		string(text) + `},"finish_reason":"length"}]}`
	healthyStream := guardedCases[0].stream
	for _, enc := range append(testCodings, "gzip, br") {
		for _, tt := range []struct {
			name   string
			answer string
			stream bool
			cut    bool
		}{{"healthy", chatAnswer, false, false}, {"healthy stream", healthyStream, true, false}, {"degenerate", degenerate, false, true}} {
			t.Run(enc+"/"+tt.name, func(t *testing.T) {
				coded := encodeAs(t, enc, []byte(tt.answer))
				up, _ := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("Accept-Encoding") != "identity" {
						t.Errorf("upstream asked for Accept-Encoding %q; want identity", r.Header.Get("Accept-Encoding"))
					}
					ct := "application/json"
					if tt.stream {
						ct = "text/event-stream"
					}
					w.Header().Set("Content-Type", ct)
					w.Header().Set("Content-Encoding", enc)
					w.Header().Set("X-Upstream", "kept")
					w.Write(coded)
				})
				_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
				resp, got := postCoded(t, base+"/v1/chat/completions", "coded-answer-"+enc, "", []byte(loopingHistory(1, tt.stream)), tt.stream)
				wantCE, wantBody := enc, coded
				if tt.stream {
					wantCE, wantBody = "", []byte(tt.answer)
				}
				if resp.Header.Get("Content-Encoding") != wantCE || resp.Header.Get("X-Upstream") != "kept" {
					t.Errorf("client headers %v; want the upstream's, Content-Encoding %q", resp.Header, wantCE)
				}
				if !tt.cut {
					if !bytes.Equal(got, wantBody) {
						t.Errorf("client got %d bytes; want the upstream's %d bytes", len(got), len(wantBody))
					}
					return
				}
				answer := decodeAs(t, enc, got)
				content := gjson.GetBytes(answer, "choices.0.message.content").String()
				if len(content) == 0 || len(content) >= len(loop) || !strings.HasPrefix(string(loop), content) {
					t.Errorf("content is %d bytes; want a proper prefix of the %d-byte degenerate text", len(content), len(loop))
				}
				if fr := gjson.GetBytes(answer, "choices.0.finish_reason").String(); fr != "stop" {
					t.Errorf("finish_reason %q; want stop (the cut answer)", fr)
				}
			})
		}
	}
}

// TestMislabelledJSONInspected: a plain JSON body labelled with a coding
// it is not in (which an upstream that ignores the label serves) is
// inspected as it is: a looping history is acted on, and a healthy one
// reaches the upstream as sent, label and bytes.
func TestMislabelledJSONInspected(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswer)
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	for _, enc := range []string{"gzip", "br", "zstd", "deflate", "compress"} {
		resp, answer := postCoded(t, base+"/v1/chat/completions", "mislabelled-"+enc, enc, []byte(loopingHistory(3, false)), false)
		<-got
		if a := resp.Header.Get(HeaderAction); a == "" || a == "none" {
			t.Errorf("a looping history labelled %s: %s %q (%s); want it acted on", enc, HeaderAction, a, answer)
		}
		healthy := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		resp, _ = postCoded(t, base+"/v1/chat/completions", "mislabelled-healthy-"+enc, enc, healthy, false)
		rec := <-got
		if resp.StatusCode != http.StatusOK || rec.body != string(healthy) || rec.header.Get("Content-Encoding") != enc {
			t.Errorf("a healthy body labelled %s: %d; upstream got %q coded %q; want it as sent",
				enc, resp.StatusCode, rec.body, rec.header.Get("Content-Encoding"))
		}
	}
}
