package main

// The side-by-side workload: the proxy's CPU per request for
// agent-sized chat requests, in one run, through nginx (proxy_buffering
// off, when it is installed), loopguard's relay alone (a path it does not
// inspect), loopguard in policy mode off and loopguard, and the previous
// release in mode off and enforcing when -previous names it, all in front
// of the same scripted upstream, which answers each with an agent's next
// turn (a short text and a tool call): one small message, 20 and 200 tool
// turns of one session (31 KB and 313 KB), then the growing sessions
// (growing.go). Every workload runs once a round through every target in
// turn, so that what else the machine does falls on all of them alike; the
// table gives each target's median round and each ratio's median over the
// rounds.

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// sideBySide measures every request-size workload and the growing sessions
// of o.growing against each proxy, o.rounds times, and prints the CPU per
// request beside nginx's.
func sideBySide(cl *http.Client, bin, previous, upstream string, o options) error {
	sessions, turns := 0, 200
	if o.growing != "" {
		if _, err := fmt.Sscanf(o.growing, "%dx%d", &sessions, &turns); err != nil || sessions < 1 || turns < 1 {
			return fmt.Errorf("-growing %q: want SESSIONSxTURNS", o.growing)
		}
	}
	targets, stop, err := startTargets(bin, previous, o.openOpts.nginx, strings.TrimPrefix(upstream, "http://"), 4*o.c)
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
	rows := make([]cpuRow, len(sizes), len(sizes)+1)
	for i, w := range sizes {
		rows[i].workload = w.name
		for _, t := range targets {
			url := t.url + t.path
			if err := warm(cl, url, w.body); err != nil {
				return fmt.Errorf("%s via %s: %w", w.name, t.name, err)
			}
			if err := checkAgentAnswer(cl, url, w.body); err != nil {
				return fmt.Errorf("%s via %s: %w", w.name, t.name, err)
			}
		}
	}
	growing := cpuRow{workload: fmt.Sprintf("%d growing sessions, turns 1..%d", sessions, turns)}
	rounds := max(1, o.rounds)
	fmt.Printf("\nside by side: CPU per request of each proxy (process utime + stime from /proc, counted in 10 ms ticks: "+
		"a run needs a second or more of it to be read to a few per cent), %d clients, %d rounds\n", o.c, rounds)
	fmt.Printf("%-32s %-22s %10s %10s %10s %14s\n", "workload", "target", "req/s", "p50", "p99", "CPU")
	for round := range rounds {
		for i, w := range sizes {
			for _, t := range targets {
				var r result
				cpu, err := cpuDuring(t, func() (err error) {
					r, err = measure(cl, t.url+t.path, w.body, w.n, o.c)
					return err
				})
				if err != nil {
					return fmt.Errorf("%s via %s: %w", w.name, t.name, err)
				}
				if r.failed > 0 {
					return fmt.Errorf("%s via %s: %d of %d failed; first: %w", w.name, t.name, r.failed, w.n, r.firstErr)
				}
				rows[i].add(t.name, cpu, w.n)
				fmt.Printf("%-32s %-22s %10.0f %10s %10s %14s\n", fmt.Sprintf("%s, round %d", w.name, round+1), t.name, r.rps, r.p50, r.p99, rows[i].last(t.name))
			}
		}
		if sessions > 0 {
			if err := growingSessions(cl, targets, bodies[:turns], sessions, round, o.openOpts.perf, &growing); err != nil {
				return err
			}
		}
	}
	if sessions > 0 {
		rows = append(rows, growing)
	}
	printCPUTable(targets, rows, rounds)
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

// cpuRow is one workload's CPU per request, by target name, one figure a
// round.
type cpuRow struct {
	workload string
	perReq   map[string][]time.Duration
}

func (r *cpuRow) add(target string, cpu time.Duration, requests int) {
	if r.perReq == nil {
		r.perReq = map[string][]time.Duration{}
	}
	r.perReq[target] = append(r.perReq[target], cpu/time.Duration(requests))
}

// last is target's latest figure, as printed for its run.
func (r *cpuRow) last(target string) string {
	rs := r.perReq[target]
	return fmt.Sprintf("%.0f µs/req", float64(rs[len(rs)-1].Nanoseconds())/1e3)
}

// median is target's median round.
func (r *cpuRow) median(target string) (time.Duration, bool) {
	rs := slices.Clone(r.perReq[target])
	if len(rs) == 0 {
		return 0, false
	}
	slices.Sort(rs)
	return rs[len(rs)/2], true
}

// ratio is the median over the rounds of a's CPU per request over b's in
// the same round: one run's ratio moves with what else the machine does,
// the median of several much less. ok is false when either is missing.
func (r *cpuRow) ratio(a, b string) (median float64, ok bool) {
	x, y := r.perReq[a], r.perReq[b]
	var ratios []float64
	for i := range min(len(x), len(y)) {
		if y[i] > 0 { // CPU time comes in 10 ms ticks
			ratios = append(ratios, float64(x[i])/float64(y[i]))
		}
	}
	if len(ratios) == 0 {
		return 0, false
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2], true
}

// ratioColumns are the ratios the table prints: the targets of the
// performance docs, and each against the previous release.
var ratioColumns = []struct{ name, a, b string }{
	{"mode off/nginx", targetModeOff, targetNginx},
	{"loopguard/nginx", targetLoopguard, targetNginx},
	{"loopguard/off", targetLoopguard, targetModeOff},
	{"prev off/nginx", targetPreviousModeOff, targetNginx},
	{"prev/nginx", targetPrevious, targetNginx},
	{"prev/prev off", targetPrevious, targetPreviousModeOff},
	{"off/prev off", targetModeOff, targetPreviousModeOff},
	{"loopguard/prev", targetLoopguard, targetPrevious},
}

// printCPUTable prints the median CPU per request of every workload and
// target, then the median ratios of ratioColumns that the targets run
// allow.
func printCPUTable(targets []openTarget, rows []cpuRow, rounds int) {
	fmt.Printf("\nCPU per request (µs), median of %d rounds\n%-36s", rounds, "workload")
	for _, t := range targets {
		fmt.Printf(" %22s", t.name)
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("%-36s", r.workload)
		for _, t := range targets {
			m, _ := r.median(t.name)
			fmt.Printf(" %22.0f", float64(m.Nanoseconds())/1e3)
		}
		fmt.Println()
	}
	ran := map[string]bool{}
	for _, t := range targets {
		ran[t.name] = true
	}
	fmt.Printf("\nratios, median of the rounds' ratios\n%-36s", "workload")
	var cols []int
	for i, c := range ratioColumns {
		if ran[c.a] && ran[c.b] {
			cols = append(cols, i)
			fmt.Printf(" %16s", c.name)
		}
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("%-36s", r.workload)
		for _, i := range cols {
			if x, ok := r.ratio(ratioColumns[i].a, ratioColumns[i].b); ok {
				fmt.Printf(" %15.2fx", x)
			} else {
				fmt.Printf(" %16s", "-")
			}
		}
		fmt.Println()
	}
}
