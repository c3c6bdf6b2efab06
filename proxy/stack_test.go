//go:build !race

package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopguard/loopguard/sse"
)

// TestRelayStack holds the relay of an inspected stream to the goroutine
// stack every goroutine starts with (4 KiB): each open stream keeps the
// stack its deepest event needed, thousands of streams are open at once,
// and the collector's heap goal counts their stacks (docs/streams.md). Each
// case relays its events on fresh goroutines, each with a fresh observer
// (its first text byte makes the detectors), beneath frames as deep as the
// ones above streamRelay.relay in a stream's goroutine, and reads what their
// stacks hold once they are parked.
func TestRelayStack(t *testing.T) {
	chat := func(delta string) string {
		return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
	}
	words := strings.Fields(`The proxy reads each event as it passes and forwards its bytes before it looks at them,
		so a healthy answer reaches the agent as fast as the model writes it.`)
	prose := func(field string) []string {
		evs := []string{chat(`{"role":"assistant","content":""}`)}
		for i := range 40 {
			evs = append(evs, chat(fmt.Sprintf(`{%q:"%s %d "}`, field, words[i%len(words)], i)))
		}
		return append(evs, chat(`{}`), "data: [DONE]\n\n")
	}
	calls := []string{chat(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":""}}]}`)}
	for _, part := range []string{`{\"path\":`, `\"src/main.go\"`, `,\"lines\":[1,`, `200]}`} {
		calls = append(calls, chat(`{"tool_calls":[{"index":0,"function":{"arguments":"`+part+`"}}]}`))
	}
	calls = append(calls, chat(`{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"list_dir","arguments":"{\"path\":\".\"}"}}]}`),
		"data: [DONE]\n\n")
	var loop []string
	for range 200 {
		loop = append(loop, chat(`{"content":"I will check the file again. "}`))
	}
	responses := []string{
		"event: response.created\ndata: " + `{"type":"response.created","sequence_number":0,"response":{"id":"resp_a","object":"response","created_at":1,"status":"in_progress","model":"m","output":[]}}` + "\n\n",
		"event: response.output_item.added\ndata: " + `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_a","type":"message","status":"in_progress","role":"assistant","content":[]}}` + "\n\n",
	}
	for i := range 40 {
		responses = append(responses, "event: response.output_text.delta\ndata: "+fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_a","output_index":0,"content_index":0,"delta":"%s "}`, i+2, words[i%len(words)])+"\n\n")
	}
	anthropic := []string{
		"event: message_start\ndata: " + `{"type":"message_start","message":{"id":"msg_a","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":1,"output_tokens":1}}}` + "\n\n",
		"event: content_block_start\ndata: " + `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n",
	}
	for i := range 40 {
		anthropic = append(anthropic, "event: content_block_delta\ndata: "+fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"%s "}}`, words[i%len(words)])+"\n\n")
	}
	for _, tt := range []struct {
		name    string
		api     *wireAPI
		events  []string
		wantCut bool
	}{
		{"chat content", chatAPI, prose("content"), false},
		{"chat reasoning", chatAPI, prose("reasoning_content"), false},
		{"chat tool calls", chatAPI, calls, false},
		{"chat cut", chatAPI, loop, true},
		{"responses text", responsesAPI, responses, false},
		{"anthropic text", anthropicAPI, anthropic, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if start := stackStartingSize(); start > 4<<10 {
				t.Skipf("goroutines start with %d bytes of stack here: none needs to grow to 8 KiB", start)
			}
			per := relayStacks(t, testPipeline(t), tt.api, tt.events, tt.wantCut)
			t.Logf("stack per relaying goroutine: %.1f KiB", per/1024)
			// A goroutine that grew to 8 KiB holds 8 KiB; one that did not,
			// 4 KiB at most, or none more when it took a stack that an
			// earlier one left.
			if per > 5<<10 {
				t.Errorf("relaying a stream grows its goroutine's stack: %.1f KiB a goroutine; want 4", per/1024)
			}
		})
	}
}

// stackStartingSize is the stack a new goroutine gets: 2 KiB, unless the
// runtime adapted it to the stacks of the goroutines it scanned.
func stackStartingSize() uint64 {
	s := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 2 << 10
	}
	return s[0].Value.Uint64()
}

// relayStacks relays events on many fresh goroutines and returns what
// each holds in stacks once they are parked. The collector is off
// meanwhile: it would shrink the stacks that grew.
func relayStacks(t *testing.T, p *pipeline, api *wireAPI, events []string, wantCut bool) float64 {
	const n = 400
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	runtime.GC()
	park := make(chan struct{})
	var ready, exited sync.WaitGroup
	var failed sync.Once
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		o := new(answerObserver) // not pooled: its detectors are made by the stream
		o.start(p, &plan{api: api, requestFacts: requestFacts{stream: true}}, nil)
		src := &chunkSource{chunks: slices.Clone(events)}
		rl := &streamRelay{obs: o, rd: sse.NewReader(src, 0)}
		w := bufio.NewWriterSize(io.Discard, streamBodyBuf)
		ready.Add(1)
		exited.Add(1)
		go func() {
			defer exited.Done()
			var st relayStats
			var stop error
			underRelayFrames(func() { _, stop = rl.relay(w, src, time.Now(), &st, false) })
			if got := errors.Is(stop, errCut); got != wantCut || st.events == 0 {
				failed.Do(func() { t.Errorf("relayed %d events, stopped by %v; want a cut %v", st.events, stop, wantCut) })
			}
			ready.Done()
			<-park
		}()
	}
	ready.Wait()
	runtime.ReadMemStats(&after)
	close(park)
	exited.Wait()
	return float64(after.StackInuse-before.StackInuse) / n
}

// relayFrames stands for the frames above streamRelay.relay in a stream's
// goroutine: the hijacked connection's handler, openStream.relay,
// relayBody and the upstream socket's pump (upstreamBody.pump,
// rawsock.Conn.Pump, net's RawRead and their callbacks). Those take about
// 1 KiB; the relay's deepest events (a tool call's deltas, keyed) leave
// room for half of that today, and the test holds them there.
const relayFrames = 512

// underRelayFrames calls f beneath a frame of relayFrames bytes.
//
//go:noinline
func underRelayFrames(f func()) {
	var frames [relayFrames]byte
	touchFrames(frames[:])
	f()
}

//go:noinline
func touchFrames(b []byte) { b[len(b)-1] = 1 }

// chunkSource returns one chunk a read, as a model's pace brings events.
type chunkSource struct{ chunks []string }

func (s *chunkSource) Read(p []byte) (int, error) {
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.chunks[0])
	if s.chunks[0] = s.chunks[0][n:]; s.chunks[0] == "" {
		s.chunks = s.chunks[1:]
	}
	return n, nil
}
