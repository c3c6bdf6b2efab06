package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/proxy"
)

// degenerateSentence is what a degenerate model repeats forever.
const degenerateSentence = "I will now read the file to see the error. "

// degeneratedNotice starts the text the request after a cut carries.
const degeneratedNotice = inject.Marker + " Your previous answer degenerated"

// cutBound is how long a degenerate stream may run before the upstream
// sees loopguard hang up: detection needs a few hundred bytes, which the
// fake sends in well under a second.
const cutBound = 5 * time.Second

// waitExchange waits until the fake finished exchange i (0-based).
func waitExchange(t *testing.T, fake *fakellm.Server, i int, within time.Duration) fakellm.Exchange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	xs, err := fake.Wait(ctx, func(xs []fakellm.Exchange) bool { return len(xs) > i && xs[i].Done })
	if err != nil {
		t.Fatalf("exchange %d not finished within %v: %v (have %d)", i, within, err, len(xs))
	}
	return xs[i]
}

// isRepetitionOf reports whether s is a non-empty prefix of unit repeated.
func isRepetitionOf(s, unit string) bool {
	if s == "" {
		return false
	}
	return strings.HasPrefix(strings.Repeat(unit, len(s)/len(unit)+1), s)
}

// TestStreamCutRealClients: an endless degenerate stream in every dialect
// is cut; each real client parses the cut stream as a normal answer ending
// with finish_reason stop and usage; the upstream sees the hang-up while it
// still had events to send; the session's next request tells the model.
func TestStreamCutRealClients(t *testing.T) {
	agents := ladderAgents(t)
	for _, d := range fakellm.Dialects {
		for name, agent := range agents {
			t.Run(d.String()+"/"+name, func(t *testing.T) {
				t.Parallel()
				fake := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{
					{Dialect: d, Content: degenerateSentence, NeverEnd: true},
					{Dialect: d, Content: "Reading config.toml instead."},
				}})
				lg := startLoopguard(t, fake.URL(), nil)
				session := "cut-" + d.String() + "-" + name
				start := time.Now()
				run := agent(t, lg.URL, agentOpts{session: session, stream: true, maxTurns: 1})
				tr := run.Turns[0]
				if tr.Err != "" {
					t.Fatalf("client error on the cut stream: %s", tr.Err)
				}
				if tr.Finish != "stop" || !isRepetitionOf(tr.Content, degenerateSentence) {
					t.Errorf("client parsed finish %q, content %.120q; want stop and the repeated sentence", tr.Finish, tr.Content)
				}
				if tr.Usage == nil || tr.Usage.Completion <= 0 || tr.Usage.Total != tr.Usage.Prompt+tr.Usage.Completion {
					t.Errorf("usage = %+v; want the estimated completion tokens", tr.Usage)
				}
				if tr.Action != "none" {
					t.Errorf("%s = %q; want none", proxy.HeaderAction, tr.Action)
				}
				x := waitExchange(t, fake, 0, cutBound)
				if !x.PeerClosed || (x.Unsent == 0) {
					t.Errorf("upstream exchange: PeerClosed %v, Unsent %d; want closed with events left", x.PeerClosed, x.Unsent)
				}
				if lag := x.ClosedAt.Sub(start); lag > cutBound {
					t.Errorf("upstream saw the close %v after the request; want within %v", lag, cutBound)
				}
				evs := lg.waitEvents(t, 1)
				if evs[0].Cut != "token_degeneration" {
					t.Errorf("chat event = %+v; want a token_degeneration cut", evs[0])
				}

				// The session's next request carries the notice upstream.
				next := agent(t, lg.URL, agentOpts{session: session, stream: true, maxTurns: 1})
				if tr := next.Turns[0]; tr.Err != "" || tr.Content != "Reading config.toml instead." {
					t.Errorf("next answer: %q, error %q", tr.Content, tr.Err)
				}
				up := waitExchange(t, fake, 1, testTimeout).Request
				if !bytes.Contains(up.Body, []byte(degeneratedNotice)) {
					t.Errorf("next upstream request lacks %q: %s", degeneratedNotice, up.Body)
				}
				if ins, ok := insertion(next.Turns[0].Body, up.Body); !ok || !bytes.Contains(ins, []byte(degeneratedNotice)) {
					t.Errorf("next upstream request is not the client's plus the notice: %s", firstDiff(next.Turns[0].Body, up.Body))
				}
			})
		}
	}
}

// TestStreamCutRawEnding checks the cut stream's last bytes as the contract
// writes them, for every dialect.
func TestStreamCutRawEnding(t *testing.T) {
	for _, d := range fakellm.Dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			fake := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{
				{Dialect: d, Content: degenerateSentence, NeverEnd: true, ID: "chatcmpl-degen", Model: "served-model", Created: 1700000001},
			}})
			lg := startLoopguard(t, fake.URL(), nil)
			got := postRaw(t, lg.URL, chatRequestJSON(true), map[string]string{"X-Session-ID": "raw-cut"})
			x := waitExchange(t, fake, 0, cutBound)
			// The client's bytes up to the cut are the upstream's bytes; the
			// upstream may have written more before it saw the close.
			forwarded, _, _ := bytes.Cut(got.body, []byte(": loopguard cut "))
			if !bytes.HasPrefix(x.Body, forwarded) {
				t.Errorf("forwarded part differs from the upstream's: %s", firstDiff(x.Body, forwarded))
			}
			events := strings.Split(strings.TrimSuffix(string(got.body), "\n\n"), "\n\n")
			n := len(events)
			if n < 4 || events[n-1] != "data: [DONE]" || !strings.HasPrefix(events[n-4], ": loopguard cut category=token_degeneration offset=") {
				t.Fatalf("stream end = %q; want the cut comment, finish chunk, usage chunk, [DONE]", events[max(0, n-4):])
			}
			fin := strings.TrimPrefix(events[n-3], "data: ")
			if gjson.Get(fin, "id").String() != "chatcmpl-degen" || gjson.Get(fin, "model").String() != "served-model" ||
				gjson.Get(fin, "created").Int() != 1700000001 || gjson.Get(fin, "choices.0.finish_reason").String() != "stop" {
				t.Errorf("final chunk = %s; want the stream's id, model, created and finish_reason stop", fin)
			}
			if u := gjson.Get(strings.TrimPrefix(events[n-2], "data: "), "usage"); u.Get("completion_tokens").Int() <= 0 {
				t.Errorf("usage chunk = %s; want estimated completion tokens", events[n-2])
			}
		})
	}
}

// healthyRepetitive are answers that repeat a structure on purpose and must
// pass untouched.
func healthyRepetitive() map[string]string {
	var table, list, steps strings.Builder
	table.WriteString("Here are the benchmark results:\n\n| benchmark | ns/op | B/op | allocs/op |\n|---|---|---|---|\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&table, "| BenchmarkParse/size=%d | %d | %d | %d |\n", 1<<(i%12), 1000+i*37, 64*(i%5), i%3)
	}
	list.WriteString("Files to update:\n\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&list, "%d. Update `pkg/handler%d.go` to return the error from `Open%d`.\n", i, i, i)
	}
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&steps, "- [x] step %d: run `go test ./pkg/mod%d/...` and check the output\n", i, i)
	}
	return map[string]string{"table": table.String(), "numbered list": list.String(), "checklist": steps.String()}
}

// TestStreamHealthyRepetitionNotCut: tables and lists of similar rows are
// not degeneration; they arrive byte for byte.
func TestStreamHealthyRepetitionNotCut(t *testing.T) {
	for name, text := range healthyRepetitive() {
		for _, d := range fakellm.Dialects {
			t.Run(name+"/"+d.String(), func(t *testing.T) {
				t.Parallel()
				fake := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{{Dialect: d, Content: text, ChunkSize: 7}}})
				lg := startLoopguard(t, fake.URL(), nil)
				body := chatRequestJSON(true)
				got := postRaw(t, lg.URL, body, map[string]string{"X-Session-ID": "table"})
				x := waitExchange(t, fake, 0, testTimeout)
				if !bytes.Equal(got.body, x.Body) {
					t.Errorf("stream changed on the way: %s", firstDiff(x.Body, got.body))
				}
				if x.PeerClosed || x.Unsent != 0 {
					t.Errorf("upstream: PeerClosed %v, Unsent %d; want the whole answer read", x.PeerClosed, x.Unsent)
				}
				if a := got.header.Get(proxy.HeaderAction); a != "none" {
					t.Errorf("%s = %q; want none", proxy.HeaderAction, a)
				}
				if e := lg.waitEvents(t, 1)[0]; e.Cut != "" {
					t.Errorf("chat event = %+v; want no cut", e)
				}
			})
		}
	}
}

// TestNonStreamDegenerateTruncated: a degenerate answer that is not
// streamed is cut at the start of the repetition, with finish_reason stop.
func TestNonStreamDegenerateTruncated(t *testing.T) {
	full := "Let me look at the logs first. " + strings.Repeat(degenerateSentence, 60)
	agents := ladderAgents(t)
	for _, d := range fakellm.Dialects {
		for name, agent := range agents {
			t.Run(d.String()+"/"+name, func(t *testing.T) {
				t.Parallel()
				fake := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{{Dialect: d, Content: full, FinishReason: "length"}}})
				lg := startLoopguard(t, fake.URL(), nil)
				run := agent(t, lg.URL, agentOpts{session: "json-cut", maxTurns: 1})
				tr := run.Turns[0]
				if tr.Err != "" {
					t.Fatalf("client error: %s", tr.Err)
				}
				if len(tr.Content) >= len(full) || !strings.HasPrefix(full, tr.Content) || !strings.HasPrefix(tr.Content, "Let me look at the logs first. ") {
					t.Errorf("content (%d bytes) = %.120q; want a proper prefix of the %d-byte answer", len(tr.Content), tr.Content, len(full))
				}
				if tr.Finish != "stop" {
					t.Errorf("finish_reason = %q; want stop", tr.Finish)
				}
				if e := lg.waitEvents(t, 1)[0]; e.Cut != "token_degeneration" {
					t.Errorf("chat event = %+v; want a token_degeneration cut", e)
				}
			})
		}
	}
}

// TestStreamDuplicateToolCallsCut: a streamed answer that emits the same
// call five times in parallel is cut after the first duplicate: clients see
// two calls and finish_reason tool_calls.
func TestStreamDuplicateToolCallsCut(t *testing.T) {
	call := fakellm.ToolCall{Name: "read_file", Arguments: `{"path":"src/main.go","offset":0,"limit":200}`}
	calls := []fakellm.ToolCall{call, call, call, call, call}
	for name, agent := range ladderAgents(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{
				{Dialect: fakellm.OpenAI, ToolCalls: calls, ChunkSize: 6, Delay: time.Millisecond},
			}})
			lg := startLoopguard(t, fake.URL(), nil)
			run := agent(t, lg.URL, agentOpts{session: "dup-calls", stream: true, maxTurns: 1})
			tr := run.Turns[0]
			if tr.Err != "" {
				t.Fatalf("client error: %s", tr.Err)
			}
			if len(tr.Calls) != 2 || tr.Finish != "tool_calls" {
				// A third call with an id, a name and empty arguments reaches
				// the client when the proxy forwards the chunk that opens it
				// before comparing the calls completed so far (see the report).
				t.Errorf("client parsed %d calls, finish %q; want 2 and tool_calls (%+v)", len(tr.Calls), tr.Finish, tr.Calls)
			}
			for i, c := range tr.Calls[:min(2, len(tr.Calls))] {
				if c.Name != call.Name || c.Args != call.Arguments {
					t.Errorf("call %d = %+v; want %s %s", i, c, call.Name, call.Arguments)
				}
			}
			x := waitExchange(t, fake, 0, cutBound)
			if !x.PeerClosed || x.Unsent == 0 {
				t.Errorf("upstream: PeerClosed %v, Unsent %d; want the rest of the burst unsent", x.PeerClosed, x.Unsent)
			}
			if e := lg.waitEvents(t, 1)[0]; e.Cut != "tool_repetition" {
				t.Errorf("chat event = %+v; want a tool_repetition cut", e)
			}
		})
	}
}

// TestStreamCutTestdata replays the degenerate answers kept in
// testdata/ladder (real shapes of degeneration) and expects each to be cut.
func TestStreamCutTestdata(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "ladder", "degenerate-*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no degenerate fixtures: %v", err)
	}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			fake := fakellm.Start(t, fakellm.Script{Responses: []fakellm.Response{{Content: string(text), ChunkSize: 5, Delay: 200 * time.Microsecond}}})
			lg := startLoopguard(t, fake.URL(), nil)
			got := postRaw(t, lg.URL, chatRequestJSON(true), nil)
			if got.status != http.StatusOK || !bytes.Contains(got.body, []byte(": loopguard cut category=")) {
				t.Errorf("status %d; stream not cut: ...%q", got.status, got.body[max(0, len(got.body)-300):])
			}
			x := waitExchange(t, fake, 0, cutBound)
			if !x.PeerClosed || x.Unsent == 0 {
				t.Errorf("upstream: PeerClosed %v, Unsent %d; want the close before the end", x.PeerClosed, x.Unsent)
			}
		})
	}
}
