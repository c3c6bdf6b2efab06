package main

// The open-streams workload (docs/streams.md): how many agents one replica can
// hold. N clients each hold a streamed answer open at a model's pace; the
// figures are the proxy's resident memory per open stream, its CPU per
// event and the share of events delivered on time, for loopguard, loopguard
// with policy mode off, loopguard's relay alone (a path it does not inspect)
// and nginx (proxy_buffering off) when it is installed, all in front of the
// same paced upstream. A flat-out run (no pacing, -c
// clients) gives the CPU per event when the relay, not the pace, is the
// limit.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loopguard/loopguard/fakellm"
)

// openOptions are the open-streams workload's settings.
type openOptions struct {
	counts []int         // open streams per run
	events int           // content events per stream
	pace   time.Duration // pause between two events of a stream
	flat   int           // streams relayed flat out, over c clients
	c      int
	nginx  string // nginx binary; empty: looked up in PATH
	// previous is the previous release's binary (-previous), measured
	// beside this one; empty: none.
	previous string
	body     int    // size of the request's history in bytes; 0: one message
	perf     string // directory for a perf profile of each run; empty: none
	only     string // comma-separated target keys (targetKey) to run; empty: all
	rounds   int    // runs of every target, taking turns; figures are summed
}

// runs reports whether the target named name is to be run.
func (o openOptions) runs(name string) bool {
	if o.only == "" {
		return true
	}
	for _, f := range strings.Split(o.only, ",") {
		if strings.TrimSpace(f) == targetKey(name) {
			return true
		}
	}
	return false
}

// targetKey is a target's name as one word: "loopguard, mode off" is
// loopguard-modeoff.
func targetKey(name string) string {
	return strings.NewReplacer(" ", "", ",", "-").Replace(name)
}

// openRequest is the request of every open stream: one message, or a
// history of about size bytes, as an agent sends.
func openRequest(size int) string {
	if size <= 0 {
		return `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"Write the plan."}]}`
	}
	return strings.Replace(chatBody(size), `"stream":false`, `"stream":true`, 1)
}

// parseCounts reads a comma-separated list of stream counts.
func parseCounts(s string) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-open: %q is not a positive count", f)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// openTarget is one proxy (or none) in front of the paced upstream.
type openTarget struct {
	name string
	url  string
	path string       // the request's path
	pids func() []int // the processes whose memory and CPU count; nil: direct
	stop func()
}

// openStreams runs the workload for every count in o.counts, then flat out,
// against each target, and prints one table.
func openStreams(bin string, o openOptions) error {
	chunk := 16
	upstream, stop, err := serveFake(fakellm.Script{Rules: []fakellm.Rule{
		{Match: func(r *fakellm.Request) bool { return r.Header.Get("X-Load") == "flat" },
			Response: fakellm.Response{Dialect: fakellm.VLLM, Content: prose(o.events * chunk), ChunkSize: chunk}},
		{Response: fakellm.Response{Dialect: fakellm.VLLM, Content: prose(o.events * chunk), ChunkSize: chunk, Delay: o.pace}},
	}})
	if err != nil {
		return err
	}
	defer stop()
	body := openRequest(o.body)
	fmt.Printf("\nopen streams: %d content events each, one every %v (on time: within %v of the previous one), %d-byte requests\n",
		o.events, o.pace, o.pace*3/2, len(body))
	fmt.Printf("%-22s %7s %7s %16s %14s %9s %7s\n", "target", "streams", "peak", "memory/stream", "CPU/event", "on time", "errors")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
	// Each run gets fresh proxies: memory a runtime kept from an earlier,
	// larger run would hide what the streams cost. With rounds, the targets
	// take turns once a round, so that what else the machine does falls on
	// all of them alike; CPU and events are summed over the rounds, and the
	// memory is the median round's.
	run := func(n, c int, pace time.Duration, direct bool) error {
		load := "paced"
		if pace == 0 {
			load = "flat"
		}
		var names []string
		results := map[string][]openResult{}
		for round := range max(o.rounds, 1) {
			targets, stop, err := startTargets(bin, o.previous, o.nginx, strings.TrimPrefix(upstream, "http://"), n)
			if err != nil {
				return err
			}
			if direct {
				targets = append([]openTarget{{name: "direct", url: upstream, path: "/v1/chat/completions"}}, targets...)
			}
			for _, t := range targets {
				if !o.runs(t.name) {
					continue
				}
				// Warm up: first-use allocations are not a stream's cost.
				if _, err := runOpen(client, t, body, 16, 16, o.events, 0); err != nil {
					stop()
					return fmt.Errorf("%s warm-up: %w", t.name, err)
				}
				name := fmt.Sprintf("%d-%s", n, load)
				if o.rounds > 1 {
					name += fmt.Sprintf("-%d", round+1)
				}
				stopPerf, err := startPerf(o.perf, t, name)
				if err != nil {
					stop()
					return err
				}
				r, err := runOpen(client, t, body, n, c, o.events, pace)
				stopPerf()
				if err != nil {
					stop()
					return fmt.Errorf("%s, %d streams: %w", t.name, n, err)
				}
				if round == 0 {
					names = append(names, t.name)
				}
				results[t.name] = append(results[t.name], r)
				time.Sleep(2 * time.Second) // let closed connections go before the next run
			}
			stop()
		}
		for _, name := range names {
			combine(results[name]).print(name, n)
		}
		if o.rounds > 1 {
			printRatios(names, results)
		}
		return nil
	}
	for _, n := range o.counts {
		if err := run(n, n, o.pace, true); err != nil {
			return err
		}
	}
	if o.flat > 0 {
		fmt.Printf("\nflat out: %d streams of %d events over %d clients, no pacing\n", o.flat, o.events, o.c)
		return run(o.flat, o.c, 0, false)
	}
	return nil
}

// The names of the targets that the side-by-side table compares.
const (
	targetNginx           = "nginx"
	targetModeOff         = "loopguard, mode off"
	targetLoopguard       = "loopguard"
	targetPreviousModeOff = "previous, mode off"
	targetPrevious        = "previous"
)

// startTargets starts nginx (when installed), loopguard's relay alone,
// loopguard in mode off and loopguard in front of upstream (host:port), and
// the previous release (the binary previous, when not empty) in mode off and
// enforcing, with room for streams open streams; stop ends them.
func startTargets(bin, previous, nginx, upstream string, streams int) (targets []openTarget, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if ng, err := startNginx(nginx, upstream, streams); err != nil {
		fmt.Printf("nginx skipped: %v\n", err)
	} else {
		stops = append(stops, ng.stop)
		ng.path = "/v1/chat/completions"
		targets = append(targets, ng)
	}
	// Mode off still watches streamed answers (only the request side is
	// skipped); a path loopguard does not inspect shows the relay alone.
	type loopguardTarget struct{ name, bin, mode, path string }
	lgts := []loopguardTarget{
		{"loopguard, relay only", bin, "off", "/v1/relay"},
		{targetModeOff, bin, "off", "/v1/chat/completions"},
		{targetLoopguard, bin, "enforce", "/v1/chat/completions"},
	}
	if previous != "" {
		lgts = append(lgts, loopguardTarget{targetPreviousModeOff, previous, "off", "/v1/chat/completions"},
			loopguardTarget{targetPrevious, previous, "enforce", "/v1/chat/completions"})
	}
	for _, lgt := range lgts {
		// startLoopguard passes the environment on: the mode is chosen
		// there, and an upstream connection for every open stream (the
		// default upstream.max_conns, 4096, would answer the rest 502).
		os.Setenv("LOOPGUARD_POLICY_MODE", lgt.mode)
		os.Setenv("LOOPGUARD_UPSTREAM_MAX_CONNS", strconv.Itoa(streams+64))
		lg, err := startLoopguard(lgt.bin, "http://"+upstream)
		os.Unsetenv("LOOPGUARD_POLICY_MODE")
		os.Unsetenv("LOOPGUARD_UPSTREAM_MAX_CONNS")
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("%s: %w", lgt.name, err)
		}
		stops = append(stops, lg.stop)
		pid := lg.cmd.Process.Pid
		targets = append(targets, openTarget{name: lgt.name, url: lg.url, path: lgt.path,
			pids: func() []int { return []int{pid} }})
	}
	return targets, stop, nil
}

// prose is n bytes of varied text: words drawn with a fixed seed, so no
// phrase repeats the way a degenerate answer does and no detector fires.
func prose(n int) string {
	words := strings.Fields(`the model reads each file once and then writes a short plan before it changes
		anything in the parser so the tests can show whether the fix holds under load while the proxy forwards
		every token as it arrives and keeps count of what was said without slowing the agent down or holding
		bytes back from the client that asked for them in the first place because latency matters most here`)
	rng := rand.New(rand.NewPCG(18, 18))
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// openResult is one run's figures.
type openResult struct {
	peakOpen         int // streams open at once, at most
	events, onTime   int64
	errors           int64
	firstErr         error
	idleRSS, peakRSS int64
	cpu              time.Duration
	measured         bool // pids known: memory and CPU figures exist
	flat             bool
}

func (r openResult) print(name string, n int) {
	mem, cpu := "", ""
	if r.measured {
		mem = fmt.Sprintf("%.1f KiB", float64(r.peakRSS-r.idleRSS)/1024/float64(n))
		if r.events > 0 {
			cpu = fmt.Sprintf("%.2f µs", float64(r.cpu.Nanoseconds())/1e3/float64(r.events))
		}
	}
	onTime := fmt.Sprintf("%.1f%%", 100*float64(r.onTime)/float64(max(r.events, 1)))
	if r.flat {
		mem, onTime = "", ""
	}
	fmt.Printf("%-22s %7d %7d %16s %14s %9s %7d\n", name, n, r.peakOpen, mem, cpu, onTime, r.errors)
	if r.firstErr != nil {
		fmt.Printf("%-22s first error: %v\n", "", r.firstErr)
	}
}

// combine is the rounds of one target as one run: CPU, events and errors
// summed, the memory of the round with the median figure.
func combine(rs []openResult) openResult {
	byMem := slices.Clone(rs)
	slices.SortFunc(byMem, func(a, b openResult) int { return cmp.Compare(a.peakRSS-a.idleRSS, b.peakRSS-b.idleRSS) })
	c := byMem[len(byMem)/2]
	c.cpu, c.events, c.onTime, c.errors = 0, 0, 0, 0
	for _, r := range rs {
		c.cpu += r.cpu
		c.events += r.events
		c.onTime += r.onTime
		c.errors += r.errors
		c.peakOpen = max(c.peakOpen, r.peakOpen)
		if c.firstErr == nil {
			c.firstErr = r.firstErr
		}
	}
	return c
}

// printRatios prints, for each loopguard target, its CPU per event over
// nginx's in each round, and their median: one run's ratio moves with what
// else the machine does, the median of several much less.
func printRatios(names []string, results map[string][]openResult) {
	ng, ok := results[targetNginx]
	if !ok {
		return
	}
	perEvent := func(r openResult) float64 { return float64(r.cpu) / float64(max(r.events, 1)) }
	for _, name := range names {
		if name == targetNginx || name == "direct" {
			continue
		}
		var ratios []float64
		for i, r := range results[name] {
			if perEvent(ng[i]) > 0 { // CPU time comes in 10 ms ticks
				ratios = append(ratios, perEvent(r)/perEvent(ng[i]))
			}
		}
		if len(ratios) == 0 {
			continue
		}
		line := ""
		for _, x := range ratios {
			line += fmt.Sprintf(" %.2f", x)
		}
		slices.Sort(ratios)
		fmt.Printf("%-22s CPU/event over nginx's, by round:%s; median %.2f\n", name, line, ratios[len(ratios)/2])
	}
}

// runOpen relays n streams of request body over c concurrent clients
// through t (c == n: all open at once) and measures t's processes
// meanwhile. pace 0 asks the upstream for a flat-out stream; a stream with
// fewer than want data events (cut, or ended early) counts as an error.
func runOpen(client *http.Client, t openTarget, body string, n, c, want int, pace time.Duration) (openResult, error) {
	load := "paced"
	if pace == 0 {
		load = "flat"
	}
	r := openResult{flat: pace == 0, measured: t.pids != nil}
	var err error
	if r.measured {
		if r.idleRSS, err = rssOf(t.pids()); err != nil {
			return r, err
		}
	}
	cpu0, err := cpuOf(t.pids)
	if err != nil {
		return r, err
	}
	var (
		open, peak, next atomic.Int64
		events, onTime   atomic.Int64
		errs             atomic.Int64
		errOnce          sync.Once
		wg               sync.WaitGroup
	)
	fail := func(err error) {
		errs.Add(1)
		errOnce.Do(func() { r.firstErr = err })
	}
	// Sample the resident memory while the streams are open; the peak counts.
	done := make(chan struct{})
	sampled := make(chan int64)
	go func() {
		var most int64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				sampled <- most
				return
			case <-tick.C:
				if r.measured {
					if v, err := rssOf(t.pids()); err == nil {
						most = max(most, v)
					}
				}
			}
		}
	}()
	// Connections are opened at most 64 at a time, so a burst of thousands
	// does not overflow a listen backlog.
	dials := make(chan struct{}, 64)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				st, err := oneStream(client, t.url+t.path, body, load, pace, dials, func() {
					o := open.Add(1)
					for p := peak.Load(); o > p && !peak.CompareAndSwap(p, o); p = peak.Load() {
					}
				})
				open.Add(-1)
				events.Add(st.events)
				onTime.Add(st.onTime)
				if err == nil && st.events < int64(want) {
					err = fmt.Errorf("a stream ended after %d events; want %d or more", st.events, want)
				}
				if err != nil {
					fail(err)
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	r.peakRSS = <-sampled
	cpu1, err := cpuOf(t.pids)
	if err != nil {
		return r, err
	}
	r.cpu = cpu1 - cpu0
	r.peakOpen = int(peak.Load())
	r.events, r.onTime, r.errors = events.Load(), onTime.Load(), errs.Load()
	return r, nil
}

type streamStats struct{ events, onTime int64 }

// oneStream requests a streamed answer from url with body and reads it to
// its end, noting each data event's gap from the one before. opened runs
// once the headers came.
func oneStream(client *http.Client, url, body, load string, pace time.Duration, dials chan struct{}, opened func()) (streamStats, error) {
	var st streamStats
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return st, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Load", load)
	dials <- struct{}{}
	resp, err := client.Do(req)
	<-dials
	opened()
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 1024)
	var last time.Time
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // a long line: its start was counted
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return st, nil
			}
			return st, err
		}
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		// The first event has no gap to judge; flat out (pace 0), every
		// event is on time.
		now := time.Now()
		if last.IsZero() || pace == 0 || now.Sub(last) <= pace*3/2 {
			st.onTime++
		}
		last = now
		st.events++
	}
}

// startPerf records t's processes with perf (call graphs, 999 samples a
// second) into dir, in a file named for t and run, until stop is called;
// without dir or pids it does nothing.
func startPerf(dir string, t openTarget, run string) (stop func(), err error) {
	if dir == "" || t.pids == nil {
		return func() {}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var pids []string
	for _, p := range t.pids() {
		pids = append(pids, strconv.Itoa(p))
	}
	out := filepath.Join(dir, fmt.Sprintf("%s-%s.data", targetKey(t.name), run))
	cmd := exec.Command("perf", "record", "-q", "-F", "999", "-g", "-p", strings.Join(pids, ","), "-o", out)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	time.Sleep(200 * time.Millisecond) // perf attaches before the load starts
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}, nil
}

// rssOf is the resident memory of pids together.
func rssOf(pids []int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		v, err := vmRSS(pid)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// cpuOf is the CPU time pids have used together; 0 when pids is nil.
func cpuOf(pids func() []int) (time.Duration, error) {
	if pids == nil {
		return 0, nil
	}
	var sum time.Duration
	for _, pid := range pids() {
		v, err := cpuTime(pid)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// nginxConf is a minimal reverse proxy for SSE: one worker (its memory and
// CPU are what a stream costs), no buffering of the answer, keep-alive to
// the upstream, room for every stream's two connections. Request bodies of
// up to 4 MiB are held in memory, as loopguard holds them, not written to a
// temporary file.
const nginxConf = `daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile %[1]d;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections %[1]d; }
http {
	access_log off;
	client_max_body_size 64m;
	client_body_buffer_size 4m;
	client_body_temp_path %[2]s/body;
	proxy_temp_path %[2]s/proxy;
	fastcgi_temp_path %[2]s/fastcgi;
	uwsgi_temp_path %[2]s/uwsgi;
	scgi_temp_path %[2]s/scgi;
	upstream fake { server %[3]s; keepalive 64; }
	server {
		listen %[4]s backlog=4096;
		location / {
			proxy_pass http://fake;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
			proxy_read_timeout 300s;
		}
	}
}
`

// startNginx runs nginx (bin, or the one in PATH) in front of upstream
// (host:port) on a free loopback port, from a temporary prefix, in the
// foreground, with room for streams open streams.
func startNginx(bin, upstream string, streams int) (openTarget, error) {
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("nginx"); err != nil {
			return openTarget{}, errors.New("nginx is not installed (apt-get install -y nginx)")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return openTarget{}, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dir, err := os.MkdirTemp("", "loopguard-load-nginx")
	if err != nil {
		return openTarget{}, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	// Two connections per stream, and room for those closing; no more
	// than the process may open.
	conns := uint64(2*streams + 2048)
	if max, ok := maxOpenFiles(); ok {
		conns = min(conns, max)
	}
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, conns, dir, upstream, addr), 0o644); err != nil {
		os.RemoveAll(dir)
		return openTarget{}, err
	}
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return openTarget{}, err
	}
	t := openTarget{name: targetNginx, url: "http://" + addr, stop: func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}}
	master := cmd.Process.Pid
	t.pids = func() []int { return append([]int{master}, children(master)...) }
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return t, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.stop()
	return openTarget{}, errors.New("nginx did not listen within 10s")
}

// children lists the child processes of pid (nginx's workers).
func children(pid int) []int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}
