package proxy

import (
	"strings"
	"testing"

	"github.com/loopguard/loopguard/sse"
)

// observeStream runs stream through o event by event, as the relay does,
// and returns what the client got and whether o stopped the stream; a
// stream o did not stop is ended with o.end.
func observeStream(t *testing.T, o *answerObserver, stream string) (string, bool) {
	t.Helper()
	rd := sse.NewReader(strings.NewReader(stream), 0)
	var out []byte
	for {
		ev, err := rd.Next()
		if err != nil {
			return string(o.end(out)), false
		}
		var stop bool
		if out, stop = o.event(&ev, out); stop {
			return string(out), true
		}
	}
}

// streamAPIsByWire returns the test streams of streamAPIs keyed by their
// wireAPI.
func streamAPIsByWire(t *testing.T) map[*wireAPI]streamAPI {
	byName := map[string]*wireAPI{"chat": chatAPI, "responses": responsesAPI, "anthropic": anthropicAPI}
	out := map[*wireAPI]streamAPI{}
	for _, a := range streamAPIs(t) {
		out[byName[a.name]] = a
	}
	return out
}
