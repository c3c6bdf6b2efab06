package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopguard/loopguard/proxy"
	"github.com/rs/zerolog"
	sashabaranov "github.com/sashabaranov/go-openai"
)

// The soak test runs an agent's loop of many turns through loopguard in front
// of an upstream that closes its connections the way real servers do: right
// after an answer without saying Connection: close (llama-server after every
// stream), after a short idle time (uvicorn, load balancers; this races the
// next request), and sometimes in the middle of a stream. Only the last is a
// turn the upstream itself fails; every other turn must succeed, and the
// client must receive exactly the bytes the upstream sent.

// soakMode is how the upstream ends one answer.
type soakMode string

const (
	soakKeep      soakMode = "keep"      // keep-alive, as it advertised
	soakClose     soakMode = "close"     // close at once, without Connection: close
	soakIdle      soakMode = "idle"      // close after a short idle time
	soakMidStream soakMode = "midstream" // close in the middle of the stream
	// The modes of the mixed soak (TestSoakMixedWorkload):
	soakDegenerate   soakMode = "degenerate"   // repeat one sentence until loopguard cuts the stream
	soakDegenerateGz soakMode = "degenerategz" // the same, gzipped although loopguard asked for identity
	soakSlow         soakMode = "slow"         // a slow stream, which its client leaves early
)

// soakUpstream is a chat-completions server written at the TCP level. The
// last user message says what to do: "turn-N mode-M".
type soakUpstream struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	sent map[int][]byte // the body bytes each turn's answer carried
	open map[net.Conn]bool
}

var soakTurnRE = regexp.MustCompile(`turn-(\d+) mode-(\w+)`)

func startSoakUpstream(t *testing.T) *soakUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &soakUpstream{ln: ln, sent: map[int][]byte{}, open: map[net.Conn]bool{}}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.open[c] = true
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				u.serve(c)
				c.Close()
				u.mu.Lock()
				delete(u.open, c)
				u.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for c := range u.open {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *soakUpstream) url() string { return "http://" + u.ln.Addr().String() }

func (u *soakUpstream) serve(c net.Conn) {
	br := bufio.NewReader(c)
	idle := time.Duration(0)
	for {
		if idle > 0 {
			_ = c.SetReadDeadline(time.Now().Add(idle))
		} else {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		m := soakTurnRE.FindSubmatch(body)
		if m == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			continue
		}
		turn, _ := strconv.Atoi(string(m[1]))
		mode := soakMode(m[2])
		stream := bytes.Contains(body, []byte(`"stream":true`))
		if mode == soakDegenerate || mode == soakDegenerateGz || mode == soakSlow {
			serveEndless(c, turn, mode)
			return
		}
		payload, complete := soakAnswer(turn, stream, mode)
		u.mu.Lock()
		u.sent[turn] = payload
		u.mu.Unlock()

		var head string
		if stream {
			head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
		} else {
			head = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(payload))
		}
		w := bufio.NewWriter(c)
		_, _ = w.WriteString(head)
		if stream {
			for _, ev := range bytes.SplitAfter(payload, []byte("\n\n")) {
				if len(ev) > 0 {
					fmt.Fprintf(w, "%x\r\n%s\r\n", len(ev), ev)
				}
			}
			if complete {
				_, _ = w.WriteString("0\r\n\r\n")
			}
		} else {
			_, _ = w.Write(payload)
		}
		_ = w.Flush()
		switch mode {
		case soakClose, soakMidStream:
			if tc, ok := c.(*net.TCPConn); ok && mode == soakMidStream {
				_ = tc.SetLinger(0) // a reset, as a crashed worker sends
			}
			return
		case soakIdle:
			idle = time.Duration(1+turn%15) * time.Millisecond
		default:
			idle = 0
		}
	}
}

// serveEndless streams one chunk event after another, each flushed, until
// the connection fails (loopguard cut the stream, or its client left) or 5 s
// have passed; the connection then closes.
func serveEndless(c net.Conn, turn int, mode soakMode) {
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
	if mode == soakDegenerateGz {
		head += "Content-Encoding: gzip\r\n"
	}
	w := bufio.NewWriter(c)
	if _, err := w.WriteString(head + "\r\n"); err != nil || w.Flush() != nil {
		return
	}
	var coded bytes.Buffer
	zw := gzip.NewWriter(&coded)
	text := "I will now read the file to see the error. "
	if mode == soakSlow {
		text = fmt.Sprintf("Turn %d goes on. ", turn)
	}
	ev := fmt.Sprintf("data: {\"id\":\"chatcmpl-soak-%d\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"soak\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", turn, text)
	deadline := time.Now().Add(5 * time.Second)
	_ = c.SetWriteDeadline(deadline)
	for time.Now().Before(deadline) {
		chunk := []byte(ev)
		if mode == soakDegenerateGz {
			coded.Reset()
			_, _ = zw.Write(chunk)
			_ = zw.Flush()
			chunk = coded.Bytes()
		}
		fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
		if w.Flush() != nil {
			return
		}
		if mode == soakSlow {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// soakAnswer is the body of one turn's answer; complete is false when the
// stream is to be broken off (its last events are never sent).
func soakAnswer(turn int, stream bool, mode soakMode) (payload []byte, complete bool) {
	id := fmt.Sprintf("chatcmpl-soak-%d", turn)
	text := fmt.Sprintf("Turn %d: I read file_%d.go; next I will check its tests.", turn, turn)
	if !stream {
		return []byte(fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":1700000000,"model":"soak","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":12,"total_tokens":%d}}`,
			id, text, 100+turn, 112+turn)), true
	}
	var b bytes.Buffer
	words := strings.SplitAfter(text, " ")
	for _, w := range words {
		fmt.Fprintf(&b, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"soak\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", id, w)
	}
	if mode == soakMidStream {
		return b.Bytes(), false
	}
	fmt.Fprintf(&b, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"soak\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", id)
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes(), true
}

// soakPlan picks each turn's streaming and mode, the same for every run of
// the test (a fixed seed), with every mode well represented.
func soakPlan(turns int, seed uint64) (stream []bool, modes []soakMode) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i < turns; i++ {
		s := r.IntN(2) == 0
		var m soakMode
		switch p := r.IntN(100); {
		case p < 35:
			m = soakKeep
		case p < 65:
			m = soakClose
		case p < 92 || !s:
			m = soakIdle
		default:
			m = soakMidStream
		}
		stream, modes = append(stream, s), append(modes, m)
	}
	return stream, modes
}

// soakMessages is the growing history an agent sends on turn i: its earlier
// answers and a new instruction.
func soakMessages(turn int, mode soakMode) []map[string]string {
	msgs := []map[string]string{{"role": "system", "content": "You are a coding agent."}}
	for j := max(0, turn-8); j < turn; j++ {
		msgs = append(msgs,
			map[string]string{"role": "user", "content": fmt.Sprintf("Read file_%d.go", j)},
			map[string]string{"role": "assistant", "content": fmt.Sprintf("Turn %d: I read file_%d.go; next I will check its tests.", j, j)})
	}
	return append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("turn-%d mode-%s", turn, mode)})
}

func TestSoakUpstreamClosingConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test")
	}
	up := startSoakUpstream(t)
	base := startProxy(t, up.url())
	const turns = 200
	stream, modes := soakPlan(turns, 42)

	t.Run("raw client, bytes", func(t *testing.T) {
		client := &http.Client{Transport: newTransport(t), Timeout: testTimeout}
		var failed, broken []int
		for i := 0; i < turns; i++ {
			body, _ := json.Marshal(map[string]any{"model": "soak", "stream": stream[i], "messages": soakMessages(i, modes[i])})
			resp, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				failed = append(failed, i)
				continue
			}
			got, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			up.mu.Lock()
			want := up.sent[i]
			up.mu.Unlock()
			if modes[i] == soakMidStream {
				// The upstream broke the stream: the client must not be told
				// it ended well, and what came before passes unchanged.
				if rerr == nil && bytes.Contains(got, []byte("[DONE]")) {
					t.Errorf("turn %d: a broken stream reached the client as complete", i)
				}
				first, _, _ := bytes.Cut(want, []byte("\n\n"))
				if len(want) == 0 || !bytes.HasPrefix(got, first) {
					t.Errorf("turn %d: broken stream's first event differs:\n%s", i, got)
				}
				broken = append(broken, i)
				continue
			}
			if resp.StatusCode != http.StatusOK || rerr != nil {
				t.Errorf("turn %d (%s, stream=%v): status %d, read error %v: %s", i, modes[i], stream[i], resp.StatusCode, rerr, got)
				failed = append(failed, i)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("turn %d (%s, stream=%v): client got\n%s\nupstream sent\n%s", i, modes[i], stream[i], got, want)
			}
		}
		t.Logf("%d turns: %d failed, %d broken by the upstream on purpose", turns, len(failed), len(broken))
		if len(failed) > 0 {
			t.Errorf("turns failed through loopguard: %v", failed)
		}
	})

	t.Run("go-openai agent", func(t *testing.T) {
		cfg := sashabaranov.DefaultConfig("sk-soak")
		cfg.BaseURL = base + "/v1"
		cfg.HTTPClient = &http.Client{Transport: newTransport(t)}
		client := sashabaranov.NewClientWithConfig(cfg)
		failed := 0
		for i := 0; i < turns; i++ {
			if modes[i] == soakMidStream {
				continue // the upstream's own failure; covered above
			}
			var msgs []sashabaranov.ChatCompletionMessage
			for _, m := range soakMessages(i, modes[i]) {
				msgs = append(msgs, sashabaranov.ChatCompletionMessage{Role: m["role"], Content: m["content"]})
			}
			req := sashabaranov.ChatCompletionRequest{Model: "soak", Messages: msgs}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			content, err := goOpenAITurn(ctx, client, req, stream[i])
			cancel()
			if want := fmt.Sprintf("Turn %d: I read file_%d.go; next I will check its tests.", i, i); err != nil || content != want {
				t.Errorf("turn %d (%s, stream=%v): %q, %v", i, modes[i], stream[i], content, err)
				failed++
			}
		}
		if failed > 0 {
			t.Errorf("%d turns failed through loopguard", failed)
		}
	})

	t.Run("node openai agent", func(t *testing.T) {
		node := nodeOrSkip(t)
		if node == "" {
			t.Skip("no node client")
		}
		var plan []map[string]any
		for i := 0; i < turns; i++ {
			if modes[i] != soakMidStream {
				plan = append(plan, map[string]any{"turn": i, "stream": stream[i], "messages": soakMessages(i, modes[i])})
			}
		}
		in, _ := json.Marshal(plan)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "soak.mjs", base+"/v1")
		cmd.Dir = nodeDir
		cmd.Stdin = bytes.NewReader(in)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("node soak.mjs: %v\nstderr: %s", err, stderr.String())
		}
		var results []struct {
			Turn    int    `json:"turn"`
			Content string `json:"content"`
			Error   string `json:"error"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &results); err != nil || len(results) != len(plan) {
			t.Fatalf("node soak.mjs output (%v): %s", err, stdout.String())
		}
		for _, r := range results {
			if want := fmt.Sprintf("Turn %d: I read file_%d.go; next I will check its tests.", r.Turn, r.Turn); r.Error != "" || r.Content != want {
				t.Errorf("turn %d: %q, error %q", r.Turn, r.Content, r.Error)
			}
		}
	})
}

// goOpenAITurn sends one chat request with go-openai and returns the answer's text.
func goOpenAITurn(ctx context.Context, client *sashabaranov.Client, req sashabaranov.ChatCompletionRequest, stream bool) (string, error) {
	if !stream {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			return "", err
		}
		return resp.Choices[0].Message.Content, nil
	}
	req.Stream = true
	st, err := client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return "", err
	}
	defer st.Close()
	var content strings.Builder
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return content.String(), nil
		}
		if err != nil {
			return content.String(), err
		}
		for _, ch := range chunk.Choices {
			content.WriteString(ch.Delta.Content)
		}
	}
}

// TestSoakMixedWorkload runs a bounded mixed workload through one loopguard,
// all at once: agents whose turns end every way soakMode knows (healthy
// streams and answers, upstreams that close or reset, degenerate streams
// that loopguard cuts, plain and gzipped, clients that leave mid-stream),
// beside an operator polling the admin API and /metrics and keeping the
// live feed open; then the shutdown that SIGTERM starts (serveUntilSignal:
// Shutdown within a grace, then the connections still open are closed)
// while streams and live feeds are running. Under -race (the normal test
// command) any data race among those paths fails the test binary; without
// it, the outcomes are still checked.
func TestSoakMixedWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test")
	}
	up := startSoakUpstream(t)
	cfg := proxy.DefaultConfig()
	cfg.Upstream.URL = up.url()
	srv, err := proxy.New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()

	const (
		agents  = 6
		perTurn = 40 // turns per agent: bounded, whatever the machine's speed
	)
	var (
		turnSeq           atomic.Int64
		cuts, left, fails atomic.Int64
		wg                sync.WaitGroup
	)
	modes := []soakMode{soakKeep, soakClose, soakIdle, soakMidStream, soakDegenerate, soakDegenerateGz, soakSlow}
	for a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 2}, Timeout: testTimeout}
			defer client.CloseIdleConnections()
			r := rand.New(rand.NewPCG(uint64(a), 33))
			for range perTurn {
				turn := int(turnSeq.Add(1))
				mode := modes[r.IntN(len(modes))]
				stream := mode != soakKeep && mode != soakClose && mode != soakIdle || r.IntN(2) == 0
				body, _ := json.Marshal(map[string]any{"model": "soak", "stream": stream, "messages": soakMessages(turn, mode)})
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-ID", fmt.Sprintf("soak-agent-%d", a))
				resp, err := client.Do(req)
				if err != nil {
					cancel()
					if mode != soakMidStream {
						t.Errorf("turn %d (%s): %v", turn, mode, err)
						fails.Add(1)
					}
					continue
				}
				var got []byte
				var rerr error
				if mode == soakSlow {
					// The client reads the first event and leaves.
					got = make([]byte, 64)
					_, rerr = io.ReadFull(resp.Body, got)
					cancel()
					left.Add(1)
				} else {
					got, rerr = io.ReadAll(resp.Body)
				}
				resp.Body.Close()
				cancel()
				switch mode {
				case soakKeep, soakClose, soakIdle:
					up.mu.Lock()
					want := up.sent[turn]
					up.mu.Unlock()
					if resp.StatusCode != http.StatusOK || rerr != nil || !bytes.Equal(got, want) {
						t.Errorf("turn %d (%s, stream=%v): status %d, %v: got %d bytes, upstream sent %d", turn, mode, stream, resp.StatusCode, rerr, len(got), len(want))
						fails.Add(1)
					}
				case soakDegenerate:
					if rerr != nil || !bytes.Contains(got, []byte(": loopguard cut category=")) || !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
						t.Errorf("turn %d (degenerate): %v; stream ends %q; want the cut's end", turn, rerr, got[max(0, len(got)-200):])
						fails.Add(1)
						continue
					}
					cuts.Add(1)
				case soakDegenerateGz:
					// Relayed decoded, without the upstream's coding.
					if ce := resp.Header.Get("Content-Encoding"); rerr != nil || ce != "" || !bytes.Contains(got, []byte(": loopguard cut category=")) || !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
						t.Errorf("turn %d (gzipped degenerate): %v, Content-Encoding %q; stream ends %q; want the cut's end, decoded", turn, rerr, ce, got[max(0, len(got)-200):])
						fails.Add(1)
						continue
					}
					cuts.Add(1)
				}
			}
		}()
	}

	// The operator: the admin API and /metrics polled, the live feed open
	// (and opened again whenever it ends), until the shutdown.
	stop := make(chan struct{})
	var ops sync.WaitGroup
	var polls, feedBytes atomic.Int64
	for range 2 {
		ops.Add(1)
		go func() {
			defer ops.Done()
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer client.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					select {
					case <-stop:
					case <-time.After(time.Duration(300+rand.IntN(700)) * time.Millisecond):
					}
					cancel() // a dashboard tab closed, or the shutdown came
				}()
				req, _ := http.NewRequestWithContext(ctx, "GET", base+"/loopguard/api/events", nil)
				if resp, err := client.Do(req); err == nil {
					n, _ := io.Copy(io.Discard, resp.Body)
					feedBytes.Add(n)
					resp.Body.Close()
				}
				cancel()
			}
		}()
	}
	ops.Add(1)
	go func() {
		defer ops.Done()
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: testTimeout}
		defer client.CloseIdleConnections()
		paths := []string{"/loopguard/api/sessions", "/loopguard/api/stats", "/metrics", "/loopguard/api/sessions/soak-agent-0"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			if resp, err := client.Get(base + paths[i%len(paths)]); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				polls.Add(1)
			}
		}
	}()

	wg.Wait()

	// The shutdown, with slow streams and the live feeds still open.
	var tail sync.WaitGroup
	tailClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 3 {
		tail.Add(1)
		go func() {
			defer tail.Done()
			body, _ := json.Marshal(map[string]any{"model": "soak", "stream": true, "messages": soakMessages(int(turnSeq.Add(1)), soakSlow)})
			resp, err := tailClient.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(150 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if err := srv.Shutdown(ctx); err != nil {
		srv.CloseConnections()
	}
	cancel()
	close(stop)
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running 10 s after the shutdown")
	}
	tail.Wait()
	ops.Wait()
	t.Logf("%d turns: %d cut, %d left by their client, %d failed; %d admin polls, %d live feed bytes",
		turnSeq.Load(), cuts.Load(), left.Load(), fails.Load(), polls.Load(), feedBytes.Load())
	if cuts.Load() == 0 || polls.Load() == 0 || feedBytes.Load() == 0 {
		t.Errorf("the workload was not mixed: %d cuts, %d polls, %d live feed bytes", cuts.Load(), polls.Load(), feedBytes.Load())
	}
}
