//go:build !race

package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/sse"
)

// TestObserveEventAllocsPerAPI holds the inspection of a healthy Responses
// and Anthropic stream to zero allocations per event in the steady state,
// as TestObserveEventAllocs does for chat: the answer reports each event's
// text to the observer through an interface, by value.
func TestObserveEventAllocsPerAPI(t *testing.T) {
	p := testPipeline(t)
	words := strings.Fields(`The proxy reads each event as it passes and forwards its bytes before it looks at them,
		so a healthy answer reaches the agent as fast as the model writes it.`)
	for _, tt := range []struct {
		api   *wireAPI
		start []string
		delta func(i int, text string) string
		name  string
	}{
		{responsesAPI, []string{
			`{"type":"response.created","sequence_number":0,"response":{"id":"resp_a","object":"response","created_at":1,"status":"in_progress","model":"m","output":[]}}`,
			`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_a","type":"message","status":"in_progress","role":"assistant","content":[]}}`,
		}, func(i int, text string) string {
			return fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_a","output_index":0,"content_index":0,"delta":%q}`, i+2, text)
		}, "response.output_text.delta"},
		{anthropicAPI, []string{
			`{"type":"message_start","message":{"id":"msg_a","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":1,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		}, func(_ int, text string) string {
			return fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, text)
		}, "content_block_delta"},
	} {
		t.Run(string(tt.api.name), func(t *testing.T) {
			o := newAnswerObserver(p, &plan{api: tt.api, requestFacts: requestFacts{stream: true}}, nil)
			defer o.release()
			event := func(data string) sse.Event {
				return sse.Event{Raw: []byte("event: " + tt.name + "\ndata: " + data + "\n\n"), Name: []byte(tt.name), Data: []byte(data)}
			}
			for _, data := range tt.start {
				ev := event(data)
				o.event(&ev, nil)
			}
			events := make([]sse.Event, 4096)
			for i := range events {
				events[i] = event(tt.delta(i, fmt.Sprintf("%s %d ", words[i%len(words)], i)))
			}
			out := make([]byte, 0, 4096)
			for i := range 64 {
				out, _ = o.event(&events[i], out[:0])
			}
			i := 64
			if n := testing.AllocsPerRun(1000, func() {
				var stop bool
				if out, stop = o.event(&events[i%len(events)], out[:0]); stop {
					t.Fatal("a healthy stream was cut")
				}
				i++
			}); n != 0 {
				t.Errorf("inspecting one %s event allocates %.1f times; want 0", tt.api.name, n)
			}
			if o.watch.text < int64(i) {
				t.Errorf("the watch saw %d bytes of text from %d events; want them inspected", o.watch.text, i)
			}
		})
	}
}
