package e2e

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopguard/loopguard/e2e/llamaserver"
	"github.com/loopguard/loopguard/proxy"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The tests in this file put loopguard in front of llama.cpp's real
// llama-server (e2e/llamaserver) and send it what an agent sends. One server
// serves the whole suite; the subtests run one after another because the
// ones that read /slots need the server to themselves.

// slotIdleBound is how soon after a cut or a hang-up no slot may be
// generating any more: well short of the seconds llamaMaxTokens would run
// for, with room for a loaded machine, where a slot took over 1 s to see
// its client leave.
const slotIdleBound = 3 * time.Second

// llamaMaxTokens is a generation that would run for seconds (about 1,800
// tokens a second here) unless something stops it.
const llamaMaxTokens = 12000

// llamaSuite is loopguard in front of one llama-server, with a count of
// the requests sent through loopguard and of the 502s it answered.
type llamaSuite struct {
	llama *llamaserver.Server
	lg    *lgServer
	// agent keeps its connections to loopguard alive, as SDKs do; direct
	// requests open a connection each, because llama-server closes its
	// side after every stream without saying so (that is loopguard's
	// problem to solve, not the baseline's).
	agent, direct *http.Client
	// proxies are the base URLs of the loopguards the suite started.
	proxies map[string]bool

	requests, badGateway atomic.Int64
}

// TestLlamaServer runs the suite against one llama-server started for it.
func TestLlamaServer(t *testing.T) {
	start := time.Now()
	s := &llamaSuite{llama: llamaserver.Start(t, llamaserver.Options{Slots: 4}), proxies: map[string]bool{}}
	s.lg = s.loopguard(t, s.llama.URL)
	agent := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}
	direct := &http.Transport{DisableCompression: true, DisableKeepAlives: true}
	t.Cleanup(agent.CloseIdleConnections)
	s.agent, s.direct = &http.Client{Transport: agent}, &http.Client{Transport: direct}

	t.Run("Transparent", s.testTransparent)
	t.Run("TurnsAfterStreams", s.testTurnsAfterStreams)
	t.Run("MoreStreamsThanSlots", s.testMoreStreamsThanSlots)
	t.Run("Ladder", s.testLadder)
	t.Run("CutStopsGeneration", s.testCutStops)
	t.Run("HangUpStopsGeneration", s.testHangUpStops)
	t.Run("CutStopsResumable", s.testCutStopsResumable)
	t.Run("HangUpLeavesResumable", s.testHangUpLeavesResumable)
	t.Run("ContextFull", s.testContextFull)

	n, bad := s.requests.Load(), s.badGateway.Load()
	t.Logf("%d requests through loopguard, %d answered 502, in %v", n, bad, time.Since(start).Round(time.Millisecond))
	if bad != 0 {
		t.Errorf("loopguard answered %d of %d requests with 502; want none", bad, n)
	}
	if n < 200 && !strings.Contains(flag.Lookup("test.run").Value.String(), "/") { // not when -run picks subtests
		t.Errorf("the suite sent %d requests through loopguard; want at least 200", n)
	}
}

// loopguard starts a loopguard in front of upstream whose requests the
// suite counts.
func (s *llamaSuite) loopguard(t *testing.T, upstream string) *lgServer {
	lg := startLoopguard(t, upstream, nil)
	s.proxies[lg.URL] = true
	return lg
}

// send makes one request to base and reads the whole answer; requests to
// a loopguard are counted. A transport error fails the test.
func (s *llamaSuite) send(t *testing.T, base, method, path, body string, hdr map[string]string) rawExchange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.do(ctx, base, method, path, body, hdr)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s%s: read: %v", method, base, path, err)
	}
	return rawExchange{resp.StatusCode, resp.Header, b}
}

// do starts one request; the caller reads and closes the body.
func (s *llamaSuite) do(ctx context.Context, base, method, path, body string, hdr map[string]string) (*http.Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := s.direct
	if s.proxies[base] {
		c = s.agent
		s.requests.Add(1)
	}
	resp, err := c.Do(req)
	if err == nil && s.proxies[base] && resp.StatusCode == http.StatusBadGateway {
		s.badGateway.Add(1)
	}
	return resp, err
}

// chat posts body to loopguard's chat route and wants a 200.
func (s *llamaSuite) chat(t *testing.T, body string, hdr map[string]string) rawExchange {
	t.Helper()
	ex := s.send(t, s.lg.URL, http.MethodPost, "/v1/chat/completions", body, hdr)
	if ex.status != http.StatusOK {
		t.Fatalf("status %d: %s", ex.status, ex.body)
	}
	return ex
}

// greedyBody is a chat request for maxTokens greedy tokens: about 60
// random words, then one 9-word phrase repeated forever. cache_prompt off
// makes every answer to it the same (a prompt half taken from the cache
// is computed in other batches).
func greedyBody(stream bool, maxTokens int) string {
	return fmt.Sprintf(`{"model":"tiny","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Tell me about the build."}],`+
		`"temperature":0,"cache_prompt":false,"max_tokens":%d,"stream":%v}`, maxTokens, stream)
}

// --- transparency ---

// llamaVaries are the members llama-server fills differently in every
// answer to the same request; normalise zeroes them (keeping their place
// and every other byte) before answers are compared byte for byte.
//
//	id, created                      every answer and chunk
//	choices.N.{message,delta}.tool_calls.M.id   random per call
//	timings.*                        measured durations and rates
func normalise(b []byte) []byte {
	out := b
	set := func(path string, v any) {
		if gjson.GetBytes(out, path).Exists() {
			if o, err := sjson.SetBytes(out, path, v); err == nil {
				out = o
			}
		}
	}
	set("id", "ID")
	set("created", 0)
	gjson.GetBytes(b, "timings").ForEach(func(k, _ gjson.Result) bool {
		set("timings."+k.String(), 0)
		return true
	})
	gjson.GetBytes(b, "choices").ForEach(func(i, ch gjson.Result) bool {
		for _, m := range []string{"message", "delta"} {
			ch.Get(m + ".tool_calls").ForEach(func(j, call gjson.Result) bool {
				if call.Get("id").Exists() {
					set(fmt.Sprintf("choices.%d.%s.tool_calls.%d.id", i.Int(), m, j.Int()), "CALL")
				}
				return true
			})
		}
		return true
	})
	return out
}

// normaliseSSE normalises the JSON of each data line of a stream and keeps
// every other byte.
func normaliseSSE(b []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || len(data) == 0 || data[0] != '{' {
			out = append(out, line...)
			continue
		}
		j := bytes.TrimRight(data, "\r\n")
		out = append(out, "data: "...)
		out = append(out, normalise(j)...)
		out = append(out, data[len(j):]...)
	}
	return out
}

// toolBody asks for one call of run_build (no arguments): tool_choice
// required plus a logit bias on <tool_call> and <|im_end|> make the random
// model call it (its weights are random: it never calls a tool by itself). bias adds a smaller bias on
// the tokens of the call's own text, so that the grammar rarely has to
// reject the model's first choice, which costs a pass over the whole
// vocabulary per token.
func toolBody(stream bool, bias string) string {
	return `{"model":"tiny","messages":[{"role":"user","content":"Build it."}],"temperature":0,"cache_prompt":false,"max_tokens":100,` +
		`"tools":[{"type":"function","function":{"name":"run_build","description":"Run the build.","parameters":{"type":"object","properties":{}}}}],` +
		`"tool_choice":"required","parallel_tool_calls":false,"logit_bias":{` + bias + `"50259":100,"50258":200},"stream":` + fmt.Sprint(stream) + `}`
}

// toolBias tokenises the call the model is to write and biases its tokens.
func (s *llamaSuite) toolBias(t *testing.T) string {
	t.Helper()
	ex := s.send(t, s.llama.URL, http.MethodPost, "/tokenize", `{"content":"{\"name\": \"run_build\", \"arguments\": {}}\n</tool_call>"}`, nil)
	toks := gjson.GetBytes(ex.body, "tokens").Array()
	if ex.status != http.StatusOK || len(toks) == 0 {
		t.Fatalf("/tokenize: %d %s", ex.status, ex.body)
	}
	var b strings.Builder
	for _, tok := range toks {
		fmt.Fprintf(&b, `"%d":30,`, tok.Int())
	}
	return b.String()
}

// loopguardHeader reports the headers loopguard adds to chat answers.
func loopguardHeader(k string) bool { return strings.HasPrefix(k, "X-Loopguard-") }

// testTransparent sends each request direct and through loopguard: the
// status, the end-to-end headers and the body must match byte for byte,
// apart from the members in llamaVaries.
func (s *llamaSuite) testTransparent(t *testing.T) {
	bias := s.toolBias(t)
	usage := strings.Replace(greedyBody(true, 24), `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
	tests := []struct {
		name, path, body string
		want             []string // members of the answer that must be there
	}{
		{"plain", "/v1/chat/completions", greedyBody(false, 24), []string{"choices.0.message.content", "timings.predicted_n", "system_fingerprint"}},
		{"stream", "/v1/chat/completions", greedyBody(true, 24), []string{"timings.cache_n"}},
		{"stream usage", "/v1/chat/completions", usage, []string{"usage.completion_tokens", "usage.prompt_tokens_details.cached_tokens"}},
		{"tool call", "/v1/chat/completions", toolBody(false, bias), []string{"choices.0.message.tool_calls.0.function.arguments"}},
		{"tool call stream", "/v1/chat/completions", toolBody(true, bias), []string{"choices.0.delta.tool_calls.0.function.name"}},
		{"grammar error", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"grammar":"root ::= ("}`, []string{"error.message"}},
		{"grammar error stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"stream":true,"grammar":"root ::= ("}`, []string{"error.type"}},
		{"completions", "/v1/completions", `{"prompt":"Once upon a time","temperature":0,"cache_prompt":false,"max_tokens":16}`, []string{"choices.0.text", "timings.prompt_n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := s.send(t, s.llama.URL, http.MethodPost, tt.path, tt.body, nil)
			got := s.send(t, s.lg.URL, http.MethodPost, tt.path, tt.body, nil)
			compareLlama(t, got, want, tt.want)
		})
	}
}

// compareLlama checks that loopguard's answer got equals the direct answer
// want (normalised) and holds the llama.cpp members in members.
func compareLlama(t *testing.T, got, want rawExchange, members []string) {
	t.Helper()
	if got.status != want.status {
		t.Fatalf("status %d; direct %d: %s", got.status, want.status, got.body)
	}
	for k, v := range want.header {
		// Content-Length varies with the lengths of the varying members.
		if !hopByHop[k] && k != "Content-Length" && strings.Join(got.header[k], ",") != strings.Join(v, ",") {
			t.Errorf("header %s = %q; direct %q", k, got.header[k], v)
		}
	}
	for k, v := range got.header {
		if !hopByHop[k] && !loopguardHeader(k) && want.header[k] == nil {
			t.Errorf("header %s = %q added; the server did not send it", k, v)
		}
	}
	g, w := normalise(got.body), normalise(want.body)
	docs := [][]byte{got.body}
	if isSSE(want.header) {
		g, w = normaliseSSE(got.body), normaliseSSE(want.body)
		docs = docs[:0]
		for _, ev := range splitEvents(got.body) {
			if d, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data: ")); ok {
				docs = append(docs, d)
			}
		}
	}
	if !bytes.Equal(g, w) {
		t.Errorf("body through loopguard differs from direct (normalised):\ngot  %s\nwant %s\nat %s", g, w, firstDiff(g, w))
	}
	for _, m := range members {
		found := false
		for _, d := range docs {
			found = found || gjson.GetBytes(d, m).Exists()
		}
		if !found {
			t.Errorf("answer lacks %s: %s", m, got.body)
		}
	}
}

func isSSE(h http.Header) bool { return strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") }

// --- connections ---

// testTurnsAfterStreams sends turns the way an agent does: right after
// streamed answers (llama-server has closed that connection without
// saying so), more than the 100 requests llama-server serves on one
// connection, and one after a pause past its 5 s keep-alive. Every turn
// must succeed.
func (s *llamaSuite) testTurnsAfterStreams(t *testing.T) {
	turn := func(i int, stream bool) {
		t.Helper()
		ex := s.chat(t, greedyBody(stream, 4), nil)
		if stream && !bytes.HasSuffix(ex.body, []byte("data: [DONE]\n\n")) {
			t.Fatalf("turn %d: stream ended %q", i, ex.body[max(0, len(ex.body)-80):])
		}
		if !stream && gjson.GetBytes(ex.body, "choices.0.finish_reason").String() != "length" {
			t.Fatalf("turn %d: answer %s", i, ex.body)
		}
	}
	// Streamed and plain answers alternating: each turn after a stream
	// meets the connection the stream left dead.
	for i := range 60 {
		turn(i, i%2 == 0)
	}
	// Plain answers back to back on one kept-alive connection: past the
	// 100th, whose answer says Connection: close.
	for i := range 110 {
		turn(60+i, false)
	}
	// A stream, then turns 1.5 s after it (within the keep-alive: most
	// failures were seen there) and 5.5 s after a plain answer (after it:
	// the server has closed the idle connection).
	turn(170, true)
	time.Sleep(1500 * time.Millisecond)
	turn(171, false)
	time.Sleep(5500 * time.Millisecond)
	turn(172, true)
	turn(173, false)
}

// testMoreStreamsThanSlots: more concurrent streams than the server has
// slots wait for one and all complete.
func (s *llamaSuite) testMoreStreamsThanSlots(t *testing.T) {
	const n = 10 // the server has 4 slots
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := s.do(ctx, s.lg.URL, http.MethodPost, "/v1/chat/completions", greedyBody(true, 48), nil)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				errs[i] = err
			case resp.StatusCode != http.StatusOK:
				errs[i] = fmt.Errorf("status %d: %s", resp.StatusCode, b)
			case !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) || !bytes.Contains(b, []byte(`"finish_reason":"length"`)):
				errs[i] = fmt.Errorf("stream did not complete: %q", b[max(0, len(b)-200):])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("stream %d: %v", i, err)
		}
	}
}

// --- the ladder ---

// testLadder: an agent that repeats a failing tool call is warned at the
// third call and answered LOOP_DETECTED by loopguard itself at the fifth,
// streamed or not; the answers in between come from llama-server.
func (s *llamaSuite) testLadder(t *testing.T) {
	for _, stream := range []bool{false, true} {
		mode := map[bool]string{true: "stream", false: "json"}[stream]
		t.Run(mode, func(t *testing.T) {
			session := map[string]string{"X-Session-ID": "llama-ladder-" + mode}
			var actions []string
			for n := 0; n <= 5; n++ {
				body, err := sjson.Set(loopingBody(n, stream), "max_tokens", 8)
				if err != nil {
					t.Fatal(err)
				}
				ex := s.chat(t, body, session)
				actions = append(actions, ex.header.Get(proxy.HeaderAction))
				fromLlama := ex.header.Get("Server") == "llama.cpp"
				if terminated := bytes.Contains(ex.body, []byte("LOOP_DETECTED")); terminated != (n == 5) || fromLlama == (n == 5) {
					t.Errorf("%d calls: LOOP_DETECTED %v, answered by llama-server %v: %s", n, terminated, fromLlama, ex.body)
				}
			}
			want := []string{"none", "none", "none", "warn", "constrain", "terminate"}
			if strings.Join(actions, ",") != strings.Join(want, ",") {
				t.Errorf("actions %q; want %q", actions, want)
			}
		})
	}
}

// --- stopping generation ---

// idle waits for every slot to be idle: a test that reads /slots starts
// from a quiet server.
func (s *llamaSuite) idle(t *testing.T) {
	t.Helper()
	if _, _, err := s.llama.WaitIdle(context.Background(), 20*time.Second); err != nil {
		t.Fatalf("before the test: %v", err)
	}
}

// waitStopped checks that generation stopped within slotIdleBound of since.
func (s *llamaSuite) waitStopped(t *testing.T, since time.Time, what string) {
	t.Helper()
	_, slots, err := s.llama.WaitIdle(context.Background(), slotIdleBound)
	took := time.Since(since)
	decoded := llamaserver.Latest(slots).Decoded()
	if err != nil {
		t.Fatalf("%s: %v (max_tokens %d)", what, err, llamaMaxTokens)
	}
	t.Logf("%s: every slot idle %v later; the generation made %d of %d tokens", what, took.Round(time.Millisecond), decoded, llamaMaxTokens)
}

// cutStream sends a degenerate stream through loopguard, reads it to its
// end and checks that loopguard cut it.
func (s *llamaSuite) cutStream(t *testing.T, method, path, body string, hdr map[string]string) {
	t.Helper()
	ex := s.send(t, s.lg.URL, method, path, body, hdr)
	if ex.status != http.StatusOK || !bytes.Contains(ex.body, []byte(": loopguard cut category=")) || !bytes.HasSuffix(ex.body, []byte("data: [DONE]\n\n")) {
		t.Fatalf("status %d; want a stream cut by loopguard, got %d bytes ending %q", ex.status, len(ex.body), ex.body[max(0, len(ex.body)-200):])
	}
}

// hangUp starts a degenerate stream through loopguard, reads its first
// content event and closes the connection.
func (s *llamaSuite) hangUp(t *testing.T, hdr map[string]string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.do(ctx, s.lg.URL, http.MethodPost, "/v1/chat/completions", greedyBody(true, llamaMaxTokens), hdr)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before its first content: %v", err)
		}
		if strings.Contains(line, `"content":"`) {
			break
		}
	}
	cancel() // closes the connection: the body was not read to its end
	resp.Body.Close()
	return time.Now()
}

func (s *llamaSuite) testCutStops(t *testing.T) {
	s.idle(t)
	s.cutStream(t, http.MethodPost, "/v1/chat/completions", greedyBody(true, llamaMaxTokens), nil)
	s.waitStopped(t, time.Now(), "cut")
}

func (s *llamaSuite) testHangUpStops(t *testing.T) {
	s.idle(t)
	s.waitStopped(t, s.hangUp(t, nil), "client hang-up")
}

// deleteStream stops a resumable generation directly, so that a failed
// test leaves the server quiet.
func (s *llamaSuite) deleteStream(t *testing.T, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if resp, err := s.do(ctx, s.llama.URL, http.MethodDelete, "/v1/stream/"+id, "", nil); err == nil {
			resp.Body.Close()
		}
	})
}

// testCutStopsResumable: llama-server goes on generating a stream with
// X-Conversation-Id after its connection closed; loopguard's cut stops it
// with DELETE /v1/stream/<id>.
func (s *llamaSuite) testCutStopsResumable(t *testing.T) {
	s.idle(t)
	s.deleteStream(t, "llama-cut")
	s.cutStream(t, http.MethodPost, "/v1/chat/completions", greedyBody(true, llamaMaxTokens), map[string]string{"X-Conversation-Id": "llama-cut"})
	s.waitStopped(t, time.Now(), "cut with X-Conversation-Id")
}

// stillRunning checks, well after a hang-up would have stopped it, that a
// generation is still running.
func (s *llamaSuite) stillRunning(t *testing.T) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	if _, _, err := s.llama.WaitIdle(context.Background(), 0); err == nil {
		t.Fatal("hang-up with X-Conversation-Id: generation stopped; want it left running for a resume")
	}
}

// testHangUpLeavesResumable: a client that hangs up on a resumable stream
// may resume it, so its generation goes on; the resume through loopguard
// is inspected like the first delivery (and cut, stopping the generation),
// and a DELETE through loopguard reaches the server.
func (s *llamaSuite) testHangUpLeavesResumable(t *testing.T) {
	s.idle(t)
	s.deleteStream(t, "llama-resume")
	s.hangUp(t, map[string]string{"X-Conversation-Id": "llama-resume"})
	s.stillRunning(t)
	s.cutStream(t, http.MethodGet, "/v1/stream/llama-resume", "", nil)
	s.waitStopped(t, time.Now(), "cut of a resumed stream")

	s.deleteStream(t, "llama-delete")
	s.hangUp(t, map[string]string{"X-Conversation-Id": "llama-delete"})
	s.stillRunning(t)
	ex := s.send(t, s.lg.URL, http.MethodDelete, "/v1/stream/llama-delete", "", nil)
	if ex.status != http.StatusNoContent {
		t.Fatalf("DELETE through loopguard: status %d: %s", ex.status, ex.body)
	}
	s.waitStopped(t, time.Now(), "DELETE through loopguard")
}

// testContextFull: llama-server's own error for a prompt longer than the
// context (exceed_context_size_error, with n_prompt_tokens and n_ctx)
// reaches the client unchanged, streamed or not. It needs a server with a
// tiny context of its own (-c 256, one slot; it starts in about a second).
func (s *llamaSuite) testContextFull(t *testing.T) {
	small := llamaserver.Start(t, llamaserver.Options{Slots: 1, Context: 256})
	lg := s.loopguard(t, small.URL)
	long := strings.Repeat("word ", 400)
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":4,"stream":%v}`, long, stream)
		want := s.send(t, small.URL, http.MethodPost, "/v1/chat/completions", body, nil)
		got := s.send(t, lg.URL, http.MethodPost, "/v1/chat/completions", body, nil)
		if want.status != http.StatusBadRequest || gjson.GetBytes(want.body, "error.type").String() != "exceed_context_size_error" {
			t.Fatalf("stream %v: direct answer %d %s; want llama-server's context error", stream, want.status, want.body)
		}
		compareLlama(t, got, want, []string{"error.n_ctx", "error.n_prompt_tokens"})
	}
}
