package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// growingSessions is the agent workload: sessions concurrent sessions, each
// sending the turns of bodies in order with its own X-Session-ID, every turn
// the whole history so far plus one tool call and its ~1.3 KB result. It
// runs them once through every target in turn (new session ids each time),
// as round round of the side-by-side workload, prints each target's CPU per
// request and adds it to row; a run is under a second of the proxy's CPU,
// counted in 10 ms ticks. With perfDir, each target's CPU is also recorded
// there with perf.
func growingSessions(cl *http.Client, targets []openTarget, bodies []string, sessions, round int, perfDir string, row *cpuRow) error {
	if round == 0 {
		mean := 0
		for _, b := range bodies {
			mean += len(b)
		}
		mean /= len(bodies)
		fmt.Printf("growing sessions: %d sessions x turns 1..%d (mean body %d KB), each with its own X-Session-ID\n", sessions, len(bodies), mean>>10)
	}
	for _, t := range targets {
		stopPerf, err := startPerf(perfDir, t, fmt.Sprintf("growing-%d", round))
		if err != nil {
			return err
		}
		var r result
		used, err := cpuDuring(t, func() (err error) {
			r, err = runSessions(cl, t.url+t.path, bodies, sessions)
			return err
		})
		stopPerf()
		if err != nil {
			return fmt.Errorf("growing sessions via %s: %w", t.name, err)
		}
		row.add(t.name, used, sessions*len(bodies))
		fmt.Printf("%-32s %-22s %10.0f %10s %10s %14s\n", fmt.Sprintf("growing sessions, round %d", round+1), t.name, r.rps, r.p50, r.p99, row.last(t.name))
	}
	return nil
}

// growingBodies returns the chat request of each turn 1..turns of one
// healthy tool-using session: every call reads another file.
func growingBodies(turns int) []string {
	out := strings.Repeat("line of output with some words 0123\n", 36)
	msgs := []string{`{"role":"system","content":"You are a coding agent."}`, `{"role":"user","content":"Port the service."}`}
	bodies := make([]string, turns)
	for i := range turns {
		args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("sed -n '%d,%dp' src/module_%d.py", i, i+40, i)})
		call, _ := json.Marshal(map[string]any{"role": "assistant", "content": "Looking at the next module.", "tool_calls": []any{
			map[string]any{"id": fmt.Sprintf("call_%d", i), "type": "function", "function": map[string]any{"name": "bash", "arguments": string(args)}}}})
		res, _ := json.Marshal(map[string]any{"role": "tool", "tool_call_id": fmt.Sprintf("call_%d", i), "content": fmt.Sprintf("module %d\n%s", i, out)})
		msgs = append(msgs, string(call), string(res))
		bodies[i] = `{"model":"` + agentModel + `","stream":false,"messages":[` + strings.Join(msgs, ",") + `]}`
	}
	return bodies
}

// runSessions sends every session's turns to url in order, the sessions
// concurrently, under session ids unique to this run.
func runSessions(cl *http.Client, url string, bodies []string, sessions int) (result, error) {
	lat := make([]time.Duration, 0, sessions*len(bodies))
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("load-%d-%d", s, start.UnixNano())
			sc := &http.Client{Transport: sessionTransport{cl.Transport, id}}
			for _, body := range bodies {
				d, err := do(sc, url, body, "")
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, d)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return result{}, firstErr
	}
	return summarize(lat, time.Since(start)), nil
}

// sessionTransport sends every request with a session's header and fails
// one that loopguard acted on: the sessions are healthy, and an injection
// would change what is measured.
type sessionTransport struct {
	http.RoundTripper
	session string
}

func (t sessionTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Session-ID", t.session)
	resp, err := t.RoundTripper.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if a := resp.Header.Get("X-Loopguard-Action"); a != "" && a != "none" {
		resp.Body.Close()
		return nil, fmt.Errorf("loopguard acted (%s) on a healthy session", a)
	}
	return resp, nil
}

// summarize is the result of requests that took lat over elapsed.
func summarize(lat []time.Duration, elapsed time.Duration) result {
	slices.Sort(lat)
	n := len(lat)
	return result{rps: float64(n) / elapsed.Seconds(), p50: lat[n/2].Round(time.Microsecond), p99: lat[n*99/100].Round(time.Microsecond)}
}
