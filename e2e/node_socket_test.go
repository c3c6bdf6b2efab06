package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/policy"
)

// nodeSocketRun is node/socket.mjs's summary of one run.
type nodeSocketRun struct {
	Turns []struct {
		Status    string `json:"status"`
		Content   string `json:"content"`
		ToolCalls []call `json:"tool_calls"`
		Error     *struct {
			Name    string `json:"name"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"turns"`
	Closed *struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	} `json:"closed"`
}

// TestNodeResponsesSocket: the official openai npm client's Responses
// WebSocket mode (ResponsesWS) through loopguard, on one socket: a healthy
// turn arrives as the upstream answered it, and a looping agent is warned,
// constrained and ends with LOOP_DETECTED on the socket, which stays open
// for the client; every other turn went upstream on the upstream's socket.
func TestNodeResponsesSocket(t *testing.T) {
	node := nodeOrSkip(t)
	if node == "" {
		return
	}
	for _, looping := range []bool{false, true} {
		t.Run(map[bool]string{false: "healthy", true: "looping"}[looping], func(t *testing.T) {
			answer := fakellm.ResponsesAnswer{Text: "The build passes."}
			if looping {
				answer = loopAnswerResponses
			}
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
				fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return answer }),
			}})
			lg := startLoopguard(t, fake.URL()+"/v1", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "socket.mjs", lg.URL+"/v1", "node-socket", "12")
			cmd.Dir = nodeDir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("node socket.mjs: %v\nstderr: %s", err, stderr.String())
			}
			var run nodeSocketRun
			if err := json.Unmarshal(stdout.Bytes(), &run); err != nil || len(run.Turns) == 0 {
				t.Fatalf("node summary %q: %v", stdout.String(), err)
			}
			for i, tr := range run.Turns {
				if tr.Error != nil {
					t.Fatalf("turn %d: %s: %s", i+1, tr.Error.Name, tr.Error.Message)
				}
			}
			if run.Closed != nil {
				t.Errorf("the socket closed under the client: %+v", *run.Closed)
			}
			upstreamTurns, posts := 0, 0
			for _, r := range fake.Requests() {
				switch {
				case r.Socket:
					upstreamTurns++
				case r.Method == http.MethodPost:
					posts++
				}
			}
			last := run.Turns[len(run.Turns)-1]
			if !looping {
				if len(run.Turns) != 1 || last.Content != "The build passes." || last.Status != "completed" || upstreamTurns != 1 || posts != 0 {
					t.Fatalf("healthy: %d turns, last %+v, %d upstream socket turns, %d POSTs; want the upstream's answer on the socket",
						len(run.Turns), last, upstreamTurns, posts)
				}
				if evs := lg.waitEvents(t, 1); evs[0].Action != policy.None {
					t.Errorf("healthy turn: action %v; want none", evs[0].Action)
				}
				return
			}
			t.Logf("looping: %d turns, %d went upstream on its socket; last: %q", len(run.Turns), upstreamTurns, last.Content)
			if !strings.Contains(last.Content, "LOOP_DETECTED") || len(last.ToolCalls) != 0 {
				t.Fatalf("last turn %+v; want LOOP_DETECTED without tool calls", last)
			}
			if len(run.Turns) > maxLoopCalls {
				t.Errorf("%d turns; want LOOP_DETECTED within %d", len(run.Turns), maxLoopCalls)
			}
			if upstreamTurns != len(run.Turns)-1 || posts != 0 {
				t.Errorf("%d socket turns and %d POSTs upstream for %d turns; want every turn but loopguard's own on the upstream's socket",
					upstreamTurns, posts, len(run.Turns))
			}
			seen := map[policy.Action]bool{}
			for _, ev := range lg.waitEvents(t, len(run.Turns)) {
				seen[ev.Action] = true
			}
			for _, a := range []policy.Action{policy.Warn, policy.Constrain, policy.Terminate} {
				if !seen[a] {
					t.Errorf("no turn was answered with %v; the ladder was %v", a, seen)
				}
			}
		})
	}
}
