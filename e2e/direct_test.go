package e2e

import (
	"testing"

	"github.com/loopguard/loopguard/fakellm"
)

// clientFunc drives one real client against base (no /v1).
type clientFunc func(t *testing.T, base string, stream bool) outcome

// realClients returns the clients to drive; Node joins when available.
func realClients(t *testing.T) map[string]clientFunc {
	cs := map[string]clientFunc{"go-openai": goOpenAI, "openai-go": officialGo}
	if node := nodeOrSkip(t); node != "" {
		cs["node-openai"] = func(t *testing.T, base string, stream bool) outcome { return nodeOpenAI(t, node, base, stream) }
	}
	return cs
}

// TestClientsParseFakeDirectly proves that the fake's dialects are what real
// clients accept, before any proxy is involved: a failure here is a fake
// bug, not a loopguard bug.
func TestClientsParseFakeDirectly(t *testing.T) {
	clients := realClients(t)
	for _, d := range fakellm.Dialects {
		for _, sc := range scenarios(d) {
			for _, stream := range []bool{true, false} {
				mode := map[bool]string{true: "stream", false: "json"}[stream]
				t.Run(d.String()+"/"+sc.name+"/"+mode, func(t *testing.T) {
					t.Parallel()
					fake := fakellm.Start(t, fakellm.Script{Loop: true, Responses: []fakellm.Response{sc.resp}})
					for name, c := range clients {
						checkOutcome(t, name, c(t, fake.URL(), stream), sc, stream)
					}
				})
			}
		}
	}
}
