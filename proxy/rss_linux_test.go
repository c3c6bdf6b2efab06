//go:build !race

package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// The memory tests measure a proxy in a process of its own, this test
// binary run again as TestRSSChild, so that the peak resident set they
// read (VmHWM) is the proxy's alone: not the test's clients', upstream's
// or bodies'. Not under the race detector, whose shadow memory would be
// most of what they read.

const rssChildEnv = "LOOPGUARD_RSS_CHILD"

// TestRSSChild is the proxy of a memory test when rssChildEnv holds its
// configuration (upstream URL, server.max_body_bytes,
// server.max_body_memory); it prints its address and serves until its
// standard input closes. Otherwise it does nothing.
func TestRSSChild(t *testing.T) {
	spec := os.Getenv(rssChildEnv)
	if spec == "" {
		t.Skip("the proxy of a memory test, run by that test")
	}
	f := strings.Fields(spec)
	cfg := DefaultConfig()
	cfg.Upstream.URL = f[0]
	cfg.Server.MaxBodyBytes, _ = strconv.Atoi(f[1])
	cfg.Server.MaxBodyMemory, _ = strconv.ParseInt(f[2], 10, 64)
	if len(f) > 3 {
		cfg.Server.BodyTimeout, _ = time.ParseDuration(f[3])
	}
	srv, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Shutdown(t.Context())
}

// rssChild is a proxy in a process of its own.
type rssChild struct {
	addr string
	pid  int
}

// startRSSChild starts a proxy of upstream up with the body limit and
// budget given, and body_timeout if not empty.
func startRSSChild(t *testing.T, up string, maxBody int, budget int64, bodyTimeout string) rssChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRSSChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %s", rssChildEnv, up, maxBody, budget, bodyTimeout))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the proxy's process: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return rssChild{addr: strings.TrimSpace(line), pid: cmd.Process.Pid}
}

// status reads a size field of the child's /proc status, in bytes.
func (c rssChild) status(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, c.pid)
	return 0
}

// rssBound is the most a proxy's resident set may grow by with bodies of
// at most maxBody bytes taking a budget of budget bytes: the budget, and
// one body's worth for what the pipeline makes of a body it inspects (its
// parse), twice, as the runtime's collector lets the heap reach twice what
// is live before it collects (GOGC=100), so buffers let go of stay
// resident for a cycle beside those in flight; and 32 MiB for the runtime,
// the connections' buffers and the goroutines' stacks.
func rssBound(budget int64, maxBody int) int64 { return 2*(budget+int64(maxBody)) + 32<<20 }

// TestBodyBombsStayWithinBudget: twenty concurrent bodies of a few
// kilobytes that each inflate to 60 MiB, in every coding, hold the proxy
// to its body budget: decoding stops where the budget would be passed,
// and those requests get 503 with Retry-After. (Which of them are served,
// if any, is a matter of timing: they grow together.)
func TestBodyBombsStayWithinBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes gigabytes")
	}
	const (
		bombs   = 20
		decoded = 60 << 20
		budget  = 64 << 20
		maxBody = 64 << 20
	)
	up := okUpstream(t)
	// A chat request whose one message is 60 MiB of one letter.
	plain := append([]byte(`{"model":"m","messages":[{"role":"user","content":"`), bytes.Repeat([]byte("a"), decoded)...)
	plain = append(plain, `"}]}`...)
	type bombCase struct {
		name string
		k    coding
		bomb []byte
	}
	var cases []bombCase
	for _, k := range []coding{codingGzip, codingDeflate, codingBrotli, codingZstd} {
		cases = append(cases, bombCase{k.String(), k, encodeOne(nil, plain, k)})
	}
	// A streaming encoder's frames do not say their size.
	cases = append(cases, bombCase{"zstd, unsized", codingZstd, encodeAs(t, "zstd", plain)})
	for _, c := range cases {
		k, bomb := c.k, c.bomb
		t.Run(c.name, func(t *testing.T) {
			child := startRSSChild(t, up.URL, maxBody, budget, "")
			post := func() (int, error) {
				req, _ := http.NewRequest(http.MethodPost, "http://"+child.addr+"/v1/chat/completions", bytes.NewReader(bomb))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Content-Encoding", k.String())
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return 0, err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
					return 0, fmt.Errorf("503 without Retry-After")
				}
				return resp.StatusCode, nil
			}
			base := child.status(t, "VmRSS")
			if code, err := post(); err != nil || code != http.StatusOK {
				t.Fatalf("one %s body alone: %d %v; want 200", k, code, err)
			}
			var wg sync.WaitGroup
			codes := make([]int, bombs)
			errs := make([]error, bombs)
			for i := range bombs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					codes[i], errs[i] = post()
				}()
			}
			wg.Wait()
			count := map[int]int{}
			for i := range bombs {
				if errs[i] != nil {
					t.Errorf("bomb %d: %v", i, errs[i])
				}
				count[codes[i]]++
			}
			peak := child.status(t, "VmHWM")
			t.Logf("%s: %d bytes inflating to %d MiB, %d at once: answers %v; peak RSS %d MiB, %d MiB over its base (bound: %d MiB over)",
				c.name, len(bomb), decoded>>20, bombs, count, peak>>20, (peak-base)>>20, rssBound(budget, maxBody)>>20)
			if peak-base > rssBound(budget, maxBody) {
				t.Errorf("%s bombs: peak RSS %d MiB over a base of %d MiB; want at most %d MiB more (budget %d MiB)",
					k, peak>>20, base>>20, rssBound(budget, maxBody)>>20, budget>>20)
			}
			if count[http.StatusOK]+count[http.StatusServiceUnavailable] != bombs || count[http.StatusServiceUnavailable] == 0 {
				t.Errorf("%s bombs: answers %v; want 200 or 503, and not all 200", k, count)
			}
			// The budget is whole again: a body alone is served.
			if code, err := post(); err != nil || code != http.StatusOK {
				t.Errorf("one %s body alone after the others: %d %v; want 200", k, code, err)
			}
		})
	}
}

// TestSocketMessagesStayWithinBudget: eight sockets that each send one
// 48 MiB message take the proxy no further than its body budget allows
// (a message that does not fit ends its socket with 1013), and once the
// sockets are idle the proxy's resident set comes back near where it
// began: no socket keeps its message's buffer.
func TestSocketMessagesStayWithinBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 384 MiB")
	}
	const (
		sockets = 8
		size    = 48 << 20
		budget  = 128 << 20
		maxBody = 64 << 20
	)
	up := startSocketUpstream(t, textTurn)
	child := startRSSChild(t, up.URL, maxBody, budget, "")
	msg := append([]byte(`{"type":"response.create","model":"gpt-4.1","input":"`), bytes.Repeat([]byte("a"), size)...)
	msg = append(msg, `"}`...)
	conns := make([]*websocket.Conn, sockets)
	for i := range conns {
		conns[i] = dialSocket(t, child.addr, "/v1/responses", nil)
		defer conns[i].Close()
	}
	base := child.status(t, "VmRSS")
	var wg sync.WaitGroup
	outcomes := make([]string, sockets)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.NetConn().SetDeadline(time.Now().Add(60 * time.Second))
			if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
				outcomes[i] = "write: " + err.Error()
				return
			}
			for {
				_, m, err := c.ReadMessage()
				var ce *websocket.CloseError
				switch {
				case errors.As(err, &ce) && ce.Code == websocket.CloseTryAgainLater:
					outcomes[i] = "1013"
					return
				case err != nil:
					outcomes[i] = err.Error()
					return
				case gjson.GetBytes(m, "type").String() == "response.completed":
					outcomes[i] = "answered"
					return
				}
			}
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for _, o := range outcomes {
		count[o]++
	}
	peak := child.status(t, "VmHWM")
	time.Sleep(5 * time.Second)
	after := child.status(t, "VmRSS")
	t.Logf("%d sockets sending %d MiB each: %v; RSS %d MiB at the start, peak %d MiB (%d over; bound %d), %d MiB 5 s later",
		sockets, size>>20, count, base>>20, peak>>20, (peak-base)>>20, rssBound(budget, maxBody)>>20, after>>20)
	if count["answered"]+count["1013"] != sockets || count["answered"] == 0 {
		t.Errorf("outcomes %v; want each answered or ended with 1013, some answered", count)
	}
	if peak-base > rssBound(budget, maxBody) {
		t.Errorf("peak RSS %d MiB over a base of %d MiB; want at most %d MiB more", peak>>20, base>>20, rssBound(budget, maxBody)>>20)
	}
	if after-base > 32<<20 {
		t.Errorf("RSS %d MiB 5 s after the messages, over a base of %d MiB; want within 32 MiB of it", after>>20, base>>20)
	}
}

// TestSlowUploadsHoldNothing: six clients that declare 64 MiB bodies and
// four chunked ones, all sending a byte a second, hold a few bytes of the
// budget, not what they declare: other clients' requests, small and
// large, keep being served beside them, and the slow ones get 408 once
// server.body_timeout has passed at under server.min_body_rate.
func TestSlowUploadsHoldNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	const (
		budget      = 256 << 20
		maxBody     = 64 << 20
		bodyTimeout = 2 * time.Second
	)
	up := okUpstream(t)
	child := startRSSChild(t, up.URL, maxBody, budget, bodyTimeout.String())
	base := child.status(t, "VmRSS")
	type slowEnd struct {
		status string
		after  time.Duration
	}
	ends := make(chan slowEnd, 10)
	stop := make(chan struct{})
	var writers sync.WaitGroup
	defer writers.Wait()
	defer close(stop)
	for i := range 10 {
		c, err := net.Dial("tcp", child.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		head := fmt.Sprintf("POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", maxBody)
		if i >= 6 {
			head = "POST /v1/files HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
		}
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		chunked := i >= 6
		writers.Add(1)
		go func() {
			defer writers.Done()
			for {
				b := "a"
				if chunked {
					b = "1\r\na\r\n"
				}
				if _, err := io.WriteString(c, b); err != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
		}()
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				ends <- slowEnd{err.Error(), time.Since(start)}
				return
			}
			resp.Body.Close()
			ends <- slowEnd{resp.Status, time.Since(start)}
		}()
	}
	// Others, meanwhile: 1 KiB and 8 MiB bodies, a few at a time.
	served, failed := 0, map[string]int{}
	for end := time.Now().Add(bodyTimeout + time.Second); time.Now().Before(end); {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, size := range []int{1 << 10, 1 << 10, 8 << 20} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := http.Post("http://"+child.addr+"/v1/files", "application/octet-stream", bytes.NewReader(make([]byte, size)))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed[err.Error()]++
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed[resp.Status]++
					return
				}
				served++
			}()
		}
		wg.Wait()
		time.Sleep(100 * time.Millisecond)
	}
	if len(failed) > 0 || served == 0 {
		t.Errorf("beside the slow uploads: %d served, failed %v; want every request served", served, failed)
	}
	for range 10 {
		select {
		case e := <-ends:
			if !strings.HasPrefix(e.status, "408") || e.after > bodyTimeout+2*time.Second {
				t.Errorf("a slow upload ended %q after %v; want 408 soon after %v", e.status, e.after.Round(time.Millisecond), bodyTimeout)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a slow upload was still being read 20 s on")
		}
	}
	peak := child.status(t, "VmHWM")
	t.Logf("10 uploads at 1 byte/s beside %d requests served: RSS %d MiB at the start, peak %d MiB (%d over; bound %d)",
		served, base>>20, peak>>20, (peak-base)>>20, slowBound>>20)
	if peak-base > slowBound {
		t.Errorf("peak RSS %d MiB over a base of %d MiB; want at most %d MiB more", peak>>20, base>>20, slowBound>>20)
	}
}

// slowBound is how far the proxy's resident set may grow in
// TestSlowUploadsHoldNothing: twice what the collector counts as live,
// and 32 MiB. What it counts is the three bodies served at a time (8 MiB
// at most each), and the slow ones' declared sizes: fasthttp sizes a
// body's buffer from its Content-Length before it reads it, address space
// that stays untouched (not resident) but that the collector counts as
// live heap, so it lets as much garbage stay resident before it collects.
const slowBound = 2*(6*64<<20+3*8<<20) + 32<<20
