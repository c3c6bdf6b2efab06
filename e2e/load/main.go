// Command load measures loopguard's cost side by side with a direct run: it
// starts the scripted upstream (fakellm) in-process, builds loopguard and
// runs it as a subprocess (so its CPU time can be read from /proc), then
// reports requests/s and p50/p99 latency direct vs through loopguard for
// non-streamed requests with a 20 KB body and for streams of 500 small SSE
// events, loopguard's CPU microseconds per request and per SSE event, and
// its RSS per idle open stream with many concurrent streams.
//
//	go run ./e2e/load [-n 2000] [-c 16] [-streams 1000] [-bin PATH]
//	go run ./e2e/load -open-only -open 1000,3000 [-open-events 200] [-open-pace 50ms] [-open-flat 500] [-nginx PATH]
//
// Then, side by side (sidebyside.go), the CPU per request of nginx (when it
// is installed), loopguard's relay alone, loopguard in policy mode off and
// loopguard for agent-sized chat requests (one small message, 20 and 200
// tool turns) and for -growing sessions (growing.go); -side-only runs only
// that.
//
//	go run ./e2e/load -side-only [-n 2000] [-c 16] [-growing 16x200] [-rounds 5] [-nginx PATH] [-previous REV] [-open 1000 -open-rounds 5]
//
// -previous REV builds loopguard as it was at the git revision REV (the
// previous release) and measures it beside this one, in mode off and
// enforcing; the tables then give each ratio against it too.
//
// -open adds the open-streams workload (openstreams.go): streams held open
// at a model's pace through loopguard, loopguard in mode off and nginx.
//
// With -upstream URL it measures against a running server instead, such as
// llama.cpp's llama-server: plain completions pass through, chat answers
// of -max-tokens tokens are inspected, streamed or not (sampled at
// temperature 1 with ignore_eos, so that every answer has its full length
// and none degenerates into a cut). The idle-stream measurement needs the
// scripted upstream and is left out.
//
//	go run ./e2e/load -upstream http://127.0.0.1:8080 -n 200 -c 4 -max-tokens 16
//
// Linux only (/proc). Everything runs on 127.0.0.1.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loopguard/loopguard/fakellm"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/PID/stat; it is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

type options struct {
	n, c, streams, events int
	bin                   string
	open                  string // open-streams workload: stream counts
	openOnly              bool
	openOpts              openOptions
	upstream              string
	maxTokens, bodySize   int
	previous              string // git revision of the previous release, measured beside
	growing               string // "SESSIONSxTURNS"
	rounds                int    // growing-sessions runs of each target, interleaved
	sideOnly              bool
}

func run() error {
	var o options
	flag.IntVar(&o.n, "n", 2000, "requests per non-streamed run")
	flag.IntVar(&o.c, "c", 16, "concurrent clients")
	flag.IntVar(&o.streams, "streams", 1000, "concurrent idle streams for the RSS measurement")
	flag.IntVar(&o.events, "events", 500, "SSE events per stream")
	flag.StringVar(&o.bin, "bin", "", "loopguard binary (default: go build from the repo root)")
	flag.StringVar(&o.open, "open", "", "open-streams workload: comma-separated counts of streams held open at once (e.g. 1000,3000)")
	flag.BoolVar(&o.openOnly, "open-only", false, "run only the open-streams workload")
	flag.IntVar(&o.openOpts.events, "open-events", 200, "content events per open stream")
	flag.DurationVar(&o.openOpts.pace, "open-pace", 50*time.Millisecond, "pause between two events of an open stream")
	flag.IntVar(&o.openOpts.flat, "open-flat", 500, "streams relayed flat out (no pacing) over -c clients after the open streams; 0 skips")
	flag.IntVar(&o.openOpts.body, "open-body", 0, "history in an open stream's request, in bytes, as an agent sends it (0: one message)")
	flag.StringVar(&o.openOpts.nginx, "nginx", "", "nginx binary to compare with (default: nginx in PATH; skipped when missing)")
	flag.StringVar(&o.openOpts.perf, "perf", "", "directory: record each proxy's CPU with perf (perf record -g) during each open-streams and growing-sessions run, one file a target and run")
	flag.IntVar(&o.openOpts.rounds, "open-rounds", 1, "open-streams rounds: each target runs each workload once a round, the targets taking turns on fresh processes; CPU and events are summed, memory is the median round's, and each loopguard target's CPU/event over nginx's is printed by round")
	flag.StringVar(&o.openOpts.only, "open-targets", "", "open-streams targets to run (default: all), comma-separated: nginx, loopguard-relayonly, loopguard-modeoff, loopguard, and with -previous previous-modeoff, previous")
	flag.StringVar(&o.upstream, "upstream", "", "a running upstream to measure against (e.g. llama-server's base URL) instead of the scripted one")
	flag.IntVar(&o.maxTokens, "max-tokens", 16, "with -upstream: tokens per non-streamed answer (streams get -events)")
	flag.IntVar(&o.bodySize, "body", 20<<10, "request body size in bytes")
	flag.StringVar(&o.growing, "growing", "16x200", "growing-sessions workload, SESSIONSxTURNS (empty: skip)")
	flag.IntVar(&o.rounds, "rounds", 5, "side-by-side rounds: each target runs every workload once a round, the targets taking turns; the table gives each target's median round and each ratio's median over the rounds")
	flag.BoolVar(&o.sideOnly, "side-only", false, "run only the side-by-side workload (request sizes and growing sessions through nginx and loopguard), and the open streams when -open is given")
	flag.StringVar(&o.previous, "previous", "", "a git revision of loopguard (the previous release) to measure beside this one, in mode off and enforcing, in the side-by-side and open-streams workloads; built from git archive into a temporary directory")
	flag.Parse()
	o.openOpts.c = o.c
	if o.sideOnly && o.upstream != "" {
		return errors.New("-side-only needs the scripted upstream (no -upstream)")
	}
	if o.open != "" {
		var err error
		if o.openOpts.counts, err = parseCounts(o.open); err != nil {
			return err
		}
	}

	upstreamURL := o.upstream
	if upstreamURL == "" {
		url, stop, err := serveFake(script(o.events))
		if err != nil {
			return err
		}
		defer stop()
		upstreamURL = url
	}

	bin := o.bin
	if bin == "" || o.previous != "" {
		dir, err := os.MkdirTemp("", "loopguard-load")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		root, err := repoRoot()
		if err != nil {
			return err
		}
		if bin == "" {
			bin = filepath.Join(dir, "loopguard")
			if err := goBuild(root, bin); err != nil {
				return err
			}
		}
		if o.previous != "" {
			if o.openOpts.previous, err = buildRevision(root, o.previous, dir); err != nil {
				return fmt.Errorf("-previous %s: %w", o.previous, err)
			}
		}
	}
	client := &http.Client{Transport: &http.Transport{
		DisableCompression: true, MaxIdleConns: 4 * o.c, MaxIdleConnsPerHost: 4 * o.c,
		// A real upstream may close a kept-alive connection without saying
		// so (llama-server after every stream), and Go's client does not
		// resend a POST that met a dead one: the direct baseline would
		// count failures that are not loopguard's. One connection per
		// request, to both targets alike.
		DisableKeepAlives: o.upstream != "",
	}}
	if o.openOnly {
		return openStreams(bin, o.openOpts)
	}
	if o.sideOnly {
		if err := sideBySide(client, bin, o.openOpts.previous, upstreamURL, o); err != nil {
			return err
		}
		if len(o.openOpts.counts) == 0 {
			return nil
		}
		client.CloseIdleConnections()
		return openStreams(bin, o.openOpts)
	}
	lg, err := startLoopguard(bin, upstreamURL)
	if err != nil {
		return err
	}
	defer lg.stop()

	direct, proxied := upstreamURL, lg.url
	nStreams := max(o.n/10, 50)
	if o.upstream != "" {
		fmt.Printf("loopguard load against %s: %d requests x %d clients (non-streamed, %d B request body, %d tokens); %d streams of %d tokens\n\n",
			o.upstream, o.n, o.c, o.bodySize, o.maxTokens, nStreams, o.events)
	} else {
		fmt.Printf("loopguard load: %d requests x %d clients (non-streamed, %d B request body); %d streams of %d events; %d idle streams\n\n",
			o.n, o.c, o.bodySize, nStreams, o.events, o.streams)
	}
	fmt.Printf("%-26s %-10s %10s %10s %10s %14s\n", "workload", "target", "req/s", "p50", "p99", "loopguard CPU")

	failed := 0
	for _, w := range workloads(o, nStreams) {
		if err := warm(client, direct+w.path, w.body); err != nil {
			return err
		}
		d, err := measure(client, direct+w.path, w.body, w.n, o.c)
		if err != nil {
			return fmt.Errorf("%s direct: %w", w.name, err)
		}
		fmt.Printf("%-26s %-10s %10.0f %10s %10s %14s\n", w.name, "direct", d.rps, d.p50, d.p99, "")
		failed += reportFailures(d, w.n)
		if err := warm(client, proxied+w.path, w.body); err != nil {
			return err
		}
		before, err := cpuTime(lg.cmd.Process.Pid)
		if err != nil {
			return err
		}
		p, err := measure(client, proxied+w.path, w.body, w.n, o.c)
		if err != nil {
			return fmt.Errorf("%s via loopguard: %w", w.name, err)
		}
		after, err := cpuTime(lg.cmd.Process.Pid)
		if err != nil {
			return err
		}
		perReq := float64((after - before).Microseconds()) / float64(w.n)
		cpu := fmt.Sprintf("%.0f µs/req", perReq)
		fmt.Printf("%-26s %-10s %10.0f %10s %10s %14s\n", w.name, "loopguard", p.rps, p.p50, p.p99, cpu)
		failed += reportFailures(p, w.n)
		if w.events > 0 {
			fmt.Printf("%-26s %-10s %10s %10s %10s %14s\n", "", "", "", "", "", fmt.Sprintf("%.2f µs/event", perReq/float64(w.events+3)))
		}
		fmt.Printf("%-26s %-10s %10s %+10s %+10s\n", "", "added", "",
			(p.p50 - d.p50).String(), (p.p99 - d.p99).String())
	}
	if o.upstream == "" { // a real model would take hours
		if err := sideBySide(client, bin, o.openOpts.previous, upstreamURL, o); err != nil {
			return err
		}
	}
	client.CloseIdleConnections()
	if failed > 0 {
		return fmt.Errorf("%d requests failed", failed)
	}
	if o.upstream != "" {
		return nil
	}

	rss, err := idleStreams(lg, o.streams)
	if err != nil {
		return fmt.Errorf("idle streams: %w", err)
	}
	fmt.Printf("\nidle open streams: %d through loopguard; RSS %.1f MiB -> %.1f MiB = %.1f KiB per stream\n",
		o.streams, float64(rss[0])/(1<<20), float64(rss[1])/(1<<20), float64(rss[1]-rss[0])/1024/float64(o.streams))
	if len(o.openOpts.counts) > 0 {
		lg.stop()
		return openStreams(bin, o.openOpts)
	}
	return nil
}

// workload is one measured run: n requests of body to path; events is the
// SSE events of a streamed answer, 0 for a non-streamed one.
type workload struct {
	name, path, body string
	n                int
	events           int
}

// workloads are the runs for the scripted upstream, or for a real one
// (-upstream), whose answers cost tokens: the pass-through run uses plain
// completions, and every request bounds its answer's length.
func workloads(o options, nStreams int) []workload {
	size := fmt.Sprintf("%d KB body", o.bodySize>>10)
	body := chatBody(o.bodySize)
	stream := strings.Replace(body, `"stream":false`, `"stream":true`, 1)
	if o.upstream == "" {
		return []workload{
			{"pass-through, " + size, "/v1/embeddings", body, o.n, 0},
			{"chat json, " + size, "/v1/chat/completions", body, o.n, 0},
			{fmt.Sprintf("chat stream, %d events", o.events), "/v1/chat/completions", stream, nStreams, o.events},
		}
	}
	// Sampled, full-length answers: a greedy answer of a small model can
	// degenerate, and loopguard would cut it short of the direct one.
	sampled := func(b string, tokens int) string {
		return strings.Replace(b, `"messages":`, fmt.Sprintf(`"max_tokens":%d,"temperature":1,"ignore_eos":true,"messages":`, tokens), 1)
	}
	prompt := strings.Repeat("lorem ipsum dolor sit amet ", max(1, o.bodySize/27))
	completion := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":1,"ignore_eos":true}`, prompt, o.maxTokens)
	return []workload{
		{"pass-through completions", "/v1/completions", completion, o.n, 0},
		{fmt.Sprintf("chat json, %d tokens", o.maxTokens), "/v1/chat/completions", sampled(body, o.maxTokens), o.n, 0},
		{fmt.Sprintf("chat stream, %d tokens", o.events), "/v1/chat/completions", sampled(stream, o.events), nStreams, o.events},
	}
}

// script answers by the X-Load header so one fake serves every workload.
func script(events int) fakellm.Script {
	is := func(v string) func(*fakellm.Request) bool {
		return func(r *fakellm.Request) bool { return r.Header.Get("X-Load") == v }
	}
	// A streamed answer of `events` content deltas of 8 bytes (plus role,
	// finish and [DONE]); non-streamed it is one small JSON body.
	return fakellm.Script{Rules: []fakellm.Rule{
		{Match: is("idle"), Response: fakellm.Response{Dialect: fakellm.VLLM, Content: "idle ", NeverEnd: true, Delay: time.Hour}},
		{Match: func(r *fakellm.Request) bool { return r.Model == agentModel }, Response: agentAnswer},
		{Response: fakellm.Response{Dialect: fakellm.VLLM, Content: answerText(events), ChunkSize: 8}},
	}}
}

// agentModel is the model of the side-by-side workload's requests, which
// agentAnswer answers: an agent's turn, the next tool call.
const agentModel = "fake-agent"

var agentAnswer = fakellm.Response{Dialect: fakellm.VLLM, Content: "Reading the next module.",
	ToolCalls: []fakellm.ToolCall{{Name: "bash", Arguments: `{"command":"sed -n '1,40p' src/next.py"}`}}}

// answerText is the content of the scripted answers: events chunks of 8
// bytes of prose. A repeated token would be a degenerate answer, which
// loopguard cuts (and then tells the session's next request about): the
// cut would be measured instead of the relay.
func answerText(events int) string { return prose(8 * events) }

// checkAgentAnswer sends body (of agentModel) to url once and fails unless
// the answer is agentAnswer, whole: the proxy measured changed nothing.
func checkAgentAnswer(c *http.Client, url, body string) error {
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct {
		Choices []struct {
			Message struct {
				Content   string
				ToolCalls []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	want := agentAnswer.ToolCalls[0]
	if len(answer.Choices) != 1 || answer.Choices[0].Message.Content != agentAnswer.Content ||
		len(answer.Choices[0].Message.ToolCalls) != 1 || answer.Choices[0].Message.ToolCalls[0].Function.Name != want.Name ||
		answer.Choices[0].Message.ToolCalls[0].Function.Arguments != want.Arguments {
		return errors.New("the answer is not the upstream's (cut or changed)")
	}
	return nil
}

// chatBody is a chat request of about size bytes: a history of user and
// assistant text turns (no tool calls, so nothing for detectors to flag).
func chatBody(size int) string {
	var b strings.Builder
	b.WriteString(`{"model":"fake-model","stream":false,"messages":[{"role":"system","content":"You are a helpful assistant."}`)
	for i := 0; b.Len() < size; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `,{"role":%q,"content":"Turn %d: %s"}`, role, i, strings.Repeat("lorem ipsum dolor sit amet ", 8))
	}
	b.WriteString(`,{"role":"user","content":"Please summarise."}]}`)
	return b.String()
}

type result struct {
	rps      float64
	p50, p99 time.Duration
	// failed counts the requests that got an error or a status other
	// than 200; firstErr is the first of them.
	failed   int
	firstErr error
}

// reportFailures prints the failures of a run of n requests and returns
// their count.
func reportFailures(r result, n int) int {
	if r.failed > 0 {
		fmt.Printf("%-26s %-10s %d of %d failed; first: %v\n", "", "failed", r.failed, n, r.firstErr)
	}
	return r.failed
}

// warm sends a few requests first; it fails only when all of them do (a
// failure is counted where it is measured).
func warm(c *http.Client, base, body string) error {
	var firstErr error
	ok := 0
	for range 20 {
		if _, err := do(c, base, body, ""); err == nil {
			ok++
		} else if firstErr == nil {
			firstErr = err
		}
	}
	if ok == 0 {
		return firstErr
	}
	return nil
}

// do sends one request to url and reads the whole answer.
func do(c *http.Client, url, body, load string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if load != "" {
		req.Header.Set("X-Load", load)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(start), err
}

// measure runs n requests over c workers and summarises their latencies;
// a failed request is counted and the run goes on.
func measure(cl *http.Client, base, body string, n, c int) (result, error) {
	lat := make([]time.Duration, 0, n)
	var next int
	var mu sync.Mutex
	var res result
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				d, err := do(cl, base, body, "")
				mu.Lock()
				if err != nil {
					res.failed++
					if res.firstErr == nil {
						res.firstErr = err
					}
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(lat) == 0 {
		return res, res.firstErr
	}
	slices.Sort(lat)
	res.rps = float64(len(lat)) / elapsed.Seconds()
	res.p50 = lat[len(lat)/2].Round(time.Microsecond)
	res.p99 = lat[len(lat)*99/100].Round(time.Microsecond)
	return res, nil
}

// idleStreams opens n streams through loopguard that each receive one event
// and then stay silent, and returns loopguard's RSS before and with them.
func idleStreams(lg *loopguard, n int) ([2]int64, error) {
	var rss [2]int64
	var err error
	if rss[0], err = vmRSS(lg.cmd.Process.Pid); err != nil {
		return rss, err
	}
	addr := strings.TrimPrefix(lg.url, "http://")
	body := chatBody(1 << 10)
	body = strings.Replace(body, `"stream":false`, `"stream":true`, 1)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return rss, fmt.Errorf("stream %d: %w", i, err)
		}
		conns = append(conns, c)
		req := "POST /v1/chat/completions HTTP/1.1\r\nHost: loopguard\r\nContent-Type: application/json\r\nX-Load: idle\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		if _, err := io.WriteString(c, req); err != nil {
			return rss, err
		}
		// Wait for the first event so the stream is fully set up.
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return rss, fmt.Errorf("stream %d: %w", i, err)
			}
			if strings.HasPrefix(line, "data: ") {
				break
			}
		}
	}
	rss[1], err = vmRSS(lg.cmd.Process.Pid)
	return rss, err
}

type loopguard struct {
	cmd *exec.Cmd
	url string
}

// startLoopguard runs bin on a free port in front of upstream and waits for
// /healthz.
func startLoopguard(bin, upstream string) (*loopguard, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "-listen", addr, "-upstream", upstream)
	cmd.Env = append(os.Environ(), "LOOPGUARD_LOG_LEVEL=warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lg := &loopguard{cmd: cmd, url: "http://" + addr}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(lg.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return lg, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	lg.stop()
	return nil, errors.New("loopguard did not become healthy within 15s")
}

func (lg *loopguard) stop() {
	_ = lg.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = lg.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = lg.cmd.Process.Kill()
		<-done
	}
}

// cpuTime reads utime+stime of pid from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after ')' are
	// state(3) ... utime(14) stime(15).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// vmRSS reads the resident set size of pid in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}

// goBuild builds the loopguard command of the module at root into bin.
func goBuild(root, bin string) error {
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	return nil
}

// buildRevision builds loopguard as it was at the git revision rev of the
// repository at root, from its files (git archive) unpacked under dir, and
// returns the binary's path.
func buildRevision(root, rev, dir string) (string, error) {
	src := filepath.Join(dir, "previous")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	unpack := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	unpack.Stdin, archive.Stderr, unpack.Stderr = pipe, os.Stderr, os.Stderr
	if err := unpack.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		_ = unpack.Wait()
		return "", fmt.Errorf("git archive: %w", err)
	}
	if err := unpack.Wait(); err != nil {
		return "", fmt.Errorf("tar: %w", err)
	}
	bin := filepath.Join(dir, "loopguard-previous")
	return bin, goBuild(src, bin)
}

// repoRoot finds the module root (the directory holding go.mod).
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the loopguard module")
	}
	return filepath.Dir(gomod), nil
}

// serveFake starts the scripted upstream on a loopback port, recording
// nothing, and returns its URL and how to stop it.
func serveFake(sc fakellm.Script) (url string, stop func(), err error) {
	fake := fakellm.New(sc)
	fake.SetRecording(false)
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = fake.Serve(fln) }()
	// Serve records the URL asynchronously; the listener knows it now.
	return "http://" + fln.Addr().String(), func() { _ = fake.Close() }, nil
}
