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
	return observeEvents(o, sse.NewReader(strings.NewReader(stream), 0).Next)
}

// observeEvents feeds o the events next reads until it fails, as the relay
// does, and returns what the client gets and whether o stopped the stream.
func observeEvents(o *answerObserver, next func() (sse.Event, error)) (string, bool) {
	var out []byte
	for {
		ev, err := next()
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
	out := map[*wireAPI]streamAPI{}
	for _, a := range streamAPIs(t) {
		out[streamAPIsWire[a.name]] = a
	}
	return out
}

// streamAPIsWire is the wireAPI of each of streamAPIs by name.
var streamAPIsWire = map[string]*wireAPI{"chat": chatAPI, "responses": responsesAPI, "anthropic": anthropicAPI}

// TestObserverReuse: an observer that cut one answer and was reset (as the
// pool does) reads the next as a new one would: a healthy stream passes
// unchanged, and the same degenerate stream is cut at the same byte, in
// every API and with tail = "trim" holding events back.
func TestObserverReuse(t *testing.T) {
	for _, tail := range []string{TailKeep, TailTrim} {
		p := testPipeline(t)
		p.cfg.Stream.Tail = tail
		for _, api := range streamAPIs(t) {
			t.Run(tail+"/"+api.name, func(t *testing.T) {
				pl := &plan{api: streamAPIsWire[api.name], requestFacts: requestFacts{stream: true}}
				degenerate := api.degenerate(40)
				fresh := newAnswerObserver(p, pl, nil)
				want, cut := observeStream(t, fresh, degenerate)
				fresh.release()
				if !cut {
					t.Fatalf("a fresh observer did not cut the degenerate stream")
				}

				o := newAnswerObserver(p, pl, nil)
				defer o.release()
				if _, cut := observeStream(t, o, degenerate); !cut {
					t.Fatalf("did not cut the degenerate stream")
				}
				o.reset()
				o.start(p, pl, nil)
				if got, stopped := observeStream(t, o, api.healthy); stopped || got != api.healthy {
					t.Errorf("reused observer: client got %q (stopped %v); want the healthy stream unchanged", got, stopped)
				}
				if o.watch.cut != nil || o.endPending {
					t.Errorf("reused observer: cut %v, end pending %v after a healthy stream", o.watch.cut, o.endPending)
				}
				o.reset()
				o.start(p, pl, nil)
				if got, cut := observeStream(t, o, degenerate); !cut || got != want {
					t.Errorf("reused observer cut %v:\n%q\nwant what a fresh one sent:\n%q", cut, got, want)
				}
			})
		}
	}
}
