package e2e

import (
	"testing"

	"github.com/loopguard/loopguard/fakellm"
)

// TestSessionTokensOnEveryAPI: the token usage the upstream reports, streamed
// or not, on chat completions, Responses and Anthropic Messages, is summed
// in the session's record, and the part spent answering looping requests
// apart (what `loopguard run` prints).
func TestSessionTokensOnEveryAPI(t *testing.T) {
	type wire struct {
		name   string
		agents map[string]agentFunc
		model  func() fakellm.Script
	}
	wires := []wire{{name: "chat", agents: ladderAgents(t), model: func() fakellm.Script { return loopingModel(fakellm.OpenAI) }}}
	for _, api := range apiCases() {
		wires = append(wires, wire{name: api.name, agents: api.agents(t),
			model: func() fakellm.Script { return fakellm.Script{Rules: []fakellm.Rule{api.looping()}} }})
	}
	for _, w := range wires {
		for name, agent := range w.agents {
			for _, stream := range []bool{false, true} {
				mode := map[bool]string{true: "stream", false: "json"}[stream]
				t.Run(w.name+"/"+name+"/"+mode, func(t *testing.T) {
					t.Parallel()
					fake := fakellm.Start(t, w.model())
					lg := startLoopguard(t, fake.URL(), nil)
					session := "tokens-" + w.name + "-" + name + "-" + mode
					run := agent(t, lg.URL, agentOpts{session: session, stream: stream, maxTurns: 10})
					lg.waitEvents(t, len(run.Turns))
					// In-process: an admin request just before the proxy's
					// Shutdown races inside fasthttp.
					s, _, ok := lg.srv.Recorder().Session(session)
					if !ok {
						t.Fatalf("no session %s", session)
					}
					if s.Tokens.Input == 0 || s.Tokens.Output == 0 || s.LoopTokens.Input == 0 ||
						s.LoopTokens.Input >= s.Tokens.Input || s.LoopTokens.Output >= s.Tokens.Output {
						t.Fatalf("session tokens %+v, loop tokens %+v; want both counted, loop turns a part", s.Tokens, s.LoopTokens)
					}
				})
			}
		}
	}
}
