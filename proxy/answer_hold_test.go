package proxy

import (
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/policy"
)

func TestCallHolder(t *testing.T) {
	p := testPipeline(t)
	streams := streamAPIsByWire(t)
	// The healthy streams run `cat Makefile`.
	terminal := func(command string) []terminalCall {
		args := `{"command":"` + command + `"}`
		key, _ := inspect.CallKey(nil, "bash", args)
		return []terminalCall{{key: key, constraint: policy.Constraint{Category: inspect.ToolRepetition,
			Pattern: "p", Tool: "bash", Args: args, Brief: "bash " + command}}}
	}
	for _, api := range []*wireAPI{chatAPI, responsesAPI, anthropicAPI} {
		stream := streams[api]
		for _, tt := range []struct {
			name        string
			command     string
			wantReplace bool
		}{
			{"another call is terminal", "make build", false},
			{"the stream's call is terminal", "cat Makefile", true},
		} {
			t.Run(string(api.name)+"/"+tt.name, func(t *testing.T) {
				o := newAnswerObserver(p, &plan{api: api, requestFacts: requestFacts{stream: true}}, nil)
				defer o.release()
				o.holdCalls(terminal(tt.command))
				got, stopped := observeStream(t, o, stream.healthy)
				if !tt.wantReplace {
					if stopped || got != stream.healthy {
						t.Fatalf("client got %q (stopped %v); want the upstream's stream unchanged", got, stopped)
					}
					if len(o.holder.held) != 0 || o.holder.replaced {
						t.Errorf("holder still holds %d bytes, replaced %v; want nothing", len(o.holder.held), o.holder.replaced)
					}
				} else {
					if !stopped || !o.holder.replaced {
						t.Fatalf("stopped %v, replaced %v; want the call replaced", stopped, o.holder.replaced)
					}
					if strings.Contains(got, stream.callStart) || !strings.Contains(got, "LOOP_DETECTED") {
						t.Errorf("client got %q; want LOOP_DETECTED in place of the call", got)
					}
				}

				o.holder.reset()
				h := &o.holder
				if len(h.terminal) != 0 || len(h.held) != 0 || h.replaced || h.checked != 0 || h.open != 0 || h.at != (heldCall{}) {
					t.Errorf("after reset: %+v; want a holder holding nothing", *h)
				}
			})
		}
	}
}
