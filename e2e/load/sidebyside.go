package main

// The side-by-side workload: the proxy's CPU per request for
// agent-sized chat requests, in one run, through nginx (proxy_buffering
// off, when it is installed), loopguard's relay alone (a path it does not
// inspect), loopguard in policy mode off and loopguard, all in front of the
// same scripted upstream, which answers each with an agent's next turn (a
// short text and a tool call): one small message, 20 and 200 tool turns of
// one session (31 KB and 313 KB), then the growing sessions (growing.go).

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// sideBySide measures every request-size workload, then the growing
// sessions of o.growing, against each proxy, and prints the CPU per request
// beside nginx's.
func sideBySide(cl *http.Client, bin, upstream string, o options) error {
	sessions, turns := 0, 200
	if o.growing != "" {
		if _, err := fmt.Sscanf(o.growing, "%dx%d", &sessions, &turns); err != nil || sessions < 1 || turns < 1 {
			return fmt.Errorf("-growing %q: want SESSIONSxTURNS", o.growing)
		}
	}
	targets, stop, err := startTargets(bin, o.openOpts.nginx, strings.TrimPrefix(upstream, "http://"), 4*o.c)
	if err != nil {
		return err
	}
	defer stop()
	bodies := growingBodies(max(turns, 200))
	// Small requests cost little each: more of them, so that the CPU
	// clock's 10 ms ticks stay a small part of what is measured.
	sizes := []struct {
		name string
		body string
		n    int
	}{
		{"1 small message", `{"model":"` + agentModel + `","stream":false,"messages":[{"role":"user","content":"Port the service."}]}`, 4 * o.n},
		{fmt.Sprintf("20 tool turns, %d KB", len(bodies[19])>>10), bodies[19], 2 * o.n},
		{fmt.Sprintf("200 tool turns, %d KB", len(bodies[199])>>10), bodies[199], max(o.n/2, 100)},
	}
	var rows []cpuRow
	fmt.Printf("\nside by side: CPU per request of each proxy (process utime + stime from /proc, counted in 10 ms ticks: "+
		"a run needs a second or more of it to be read to a few per cent), %d clients\n", o.c)
	fmt.Printf("%-26s %-22s %10s %10s %10s %14s\n", "workload", "target", "req/s", "p50", "p99", "CPU")
	for _, w := range sizes {
		row := cpuRow{workload: w.name}
		for _, t := range targets {
			url := t.url + t.path
			if err := warm(cl, url, w.body); err != nil {
				return fmt.Errorf("%s via %s: %w", w.name, t.name, err)
			}
			if err := checkAgentAnswer(cl, url, w.body); err != nil {
				return fmt.Errorf("%s via %s: %w", w.name, t.name, err)
			}
			var r result
			cpu, err := cpuDuring(t, func() (err error) {
				r, err = measure(cl, url, w.body, w.n, o.c)
				return err
			})
			if err != nil {
				return fmt.Errorf("%s via %s: %w", w.name, t.name, err)
			}
			if r.failed > 0 {
				return fmt.Errorf("%s via %s: %d of %d failed; first: %w", w.name, t.name, r.failed, w.n, r.firstErr)
			}
			row.add(t.name, cpu, w.n)
			fmt.Printf("%-26s %-22s %10.0f %10s %10s %14s\n", w.name, t.name, r.rps, r.p50, r.p99, row.last())
		}
		rows = append(rows, row)
	}
	if sessions > 0 {
		grown := bodies[:turns]
		row, err := growingSessions(cl, targets, grown, sessions, max(1, o.rounds), o.openOpts.perf)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	printCPUTable(targets, rows)
	return nil
}

// cpuDuring runs f and returns the CPU time t's processes used meanwhile.
func cpuDuring(t openTarget, f func() error) (time.Duration, error) {
	before, err := cpuOf(t.pids)
	if err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	after, err := cpuOf(t.pids)
	return after - before, err
}

// cpuRow is one workload's CPU per request, by target name.
type cpuRow struct {
	workload string
	perReq   map[string]time.Duration
	lastName string
}

func (r *cpuRow) add(target string, cpu time.Duration, requests int) {
	if r.perReq == nil {
		r.perReq = map[string]time.Duration{}
	}
	r.perReq[target] = cpu / time.Duration(requests)
	r.lastName = target
}

func (r *cpuRow) last() string {
	return fmt.Sprintf("%.0f µs/req", float64(r.perReq[r.lastName].Nanoseconds())/1e3)
}

// printCPUTable prints the CPU per request of every workload and target,
// and each loopguard target's ratio to nginx and loopguard's to its own
// mode off (the targets).
func printCPUTable(targets []openTarget, rows []cpuRow) {
	fmt.Printf("\nCPU per request (µs)\n%-36s", "workload")
	for _, t := range targets {
		fmt.Printf(" %22s", t.name)
	}
	fmt.Printf(" %16s %16s %16s\n", "mode off/nginx", "loopguard/nginx", "loopguard/off")
	ratio := func(r cpuRow, a, b string) string {
		x, y := r.perReq[a], r.perReq[b]
		if x == 0 || y == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", float64(x)/float64(y))
	}
	for _, r := range rows {
		fmt.Printf("%-36s", r.workload)
		for _, t := range targets {
			fmt.Printf(" %22.0f", float64(r.perReq[t.name].Nanoseconds())/1e3)
		}
		fmt.Printf(" %16s %16s %16s\n", ratio(r, targetModeOff, targetNginx), ratio(r, targetLoopguard, targetNginx),
			ratio(r, targetLoopguard, targetModeOff))
	}
}
