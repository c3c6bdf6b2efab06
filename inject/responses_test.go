package inject

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/sse"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

func TestInsertResponses(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		p        Placement
		want     string
		wantUsed Placement
	}{
		{"auto after output", `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok \u00e9"}]}`, Auto,
			`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok \u00e9\n\nNOTE"}]}`, Tool},
		{"auto output array", `{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}]}`, Auto,
			`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"},{"type":"input_text","text":"NOTE"}]}]}`, Tool},
		{"auto after user", `{"input":[{"role":"user","content":"hi"}]}`, Auto,
			`{"input":[{"role":"user","content":"hi\n\nNOTE"}]}`, User},
		{"auto user parts", `{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`, Auto,
			`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_text","text":"NOTE"}]}]}`, User},
		{"auto after assistant", `{"input":[{"role":"assistant","content":"a"}], "store":true}`, Auto,
			`{"input":[{"role":"assistant","content":"a"},{"role":"user","content":"NOTE"}], "store":true}`, User},
		{"tool not last", `{"input":[{"type":"function_call_output","call_id":"c","output":"x"},{"role":"user","content":"y"}]}`, Tool,
			`{"input":[{"type":"function_call_output","call_id":"c","output":"x\n\nNOTE"},{"role":"user","content":"y"}]}`, Tool},
		{"tool without output", `{"input":[]}`, Tool, `{"input":[{"role":"user","content":"NOTE"}]}`, User},
		{"string input", `{"model":"m","input":"do it"}`, Auto, `{"model":"m","input":"do it\n\nNOTE"}`, User},
		{"system appends instructions", `{"instructions":"be \"brief\"","input":"x"}`, System, `{"instructions":"be \"brief\"\n\nNOTE","input":"x"}`, System},
		{"system adds instructions", `{"input":"x"}`, System, `{"instructions":"NOTE","input":"x"}`, System},
		{"system replaces null", `{"instructions":null,"input":"x"}`, System, `{"instructions":"NOTE","input":"x"}`, System},
		{"continuation", `{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`, Auto,
			`{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c","output":"x\n\nNOTE"}]}`, Tool},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, used, err := InsertResponses([]byte(tt.give), tt.p, "NOTE")
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want || used != tt.wantUsed {
				t.Errorf("InsertResponses = %s, %s;\nwant %s, %s", got, used, tt.want, tt.wantUsed)
			}
		})
	}
	for _, give := range []string{`{"model":"x"}`, `{"input":3}`, `nope`} {
		if _, _, err := InsertResponses([]byte(give), Auto, "x"); err == nil {
			t.Errorf("InsertResponses(%s): no error", give)
		}
	}
}

func TestApplyResponses(t *testing.T) {
	in := stableInjector(t, Config{})
	body := []byte(`{"model":"gpt-5","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`)
	v := readVerdict(t, "tool_repetition")
	res, err := in.ApplyResponses(body, Edit{Warnings: []Loop{{Verdict: v}}, Constraints: []Loop{{Verdict: v, Collapse: true}}})
	if err != nil {
		t.Fatal(err)
	}
	out := gjson.GetBytes(res.Body, "input.0.output").String()
	if res.Placement != Tool || !strings.HasPrefix(out, "x\n\n<loop-recovery reset=\"0\"") || !strings.Contains(out, Marker) {
		t.Errorf("ApplyResponses = %s (%s)", res.Body, res.Placement)
	}
	if res, err := in.ApplyResponses(body, Edit{}); err != nil || !bytes.Equal(res.Body, body) {
		t.Errorf("empty edit changed the body: %s, %v", res.Body, err)
	}
}

// serve answers every request with the given response and counts requests.
func serve(t *testing.T, fn func(body []byte) Response) (*httptest.Server, *int) {
	t.Helper()
	n := new(int)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*n++
		body, _ := io.ReadAll(r.Body)
		res := fn(body)
		for _, h := range res.Header {
			w.Header().Set(h.Name, h.Value)
		}
		w.WriteHeader(res.Status)
		_, _ = w.Write(res.Body)
	}))
	t.Cleanup(srv.Close)
	return srv, n
}

func TestTerminateResponsesOpenAIGo(t *testing.T) {
	in := stableInjector(t, Config{})
	v := readVerdict(t, "tool_repetition")
	srv, _ := serve(t, func(body []byte) Response {
		res, err := in.TerminateResponses(body, Loop{Verdict: v})
		if err != nil {
			t.Error(err)
		}
		return res
	})
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test"))
	params := responses.ResponseNewParams{Model: "gpt-5", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	resp, err := client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != responses.ResponseStatusCompleted || !strings.HasPrefix(resp.OutputText(), TerminatePrefix) ||
		len(resp.Output) != 1 || resp.Output[0].Type != "message" || resp.Model != "gpt-5" {
		t.Errorf("response = %s", resp.RawJSON())
	}

	stream := client.Responses.NewStreaming(context.Background(), params)
	var text strings.Builder
	var last responses.ResponseStreamEventUnion
	seq := int64(-1)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq+1 {
			t.Errorf("sequence_number %d after %d", ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
		last = ev
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if last.Type != "response.completed" || last.Response.OutputText() != text.String() || !strings.HasPrefix(text.String(), TerminatePrefix) {
		t.Errorf("last event %s: %q; streamed %q", last.Type, last.Response.OutputText(), text.String())
	}
}

func TestTerminateResponsesErrorNotRetried(t *testing.T) {
	in := stableInjector(t, Config{TerminateAs: AsError})
	v := readVerdict(t, "tool_repetition")
	srv, n := serve(t, func(body []byte) Response { r, _ := in.TerminateResponses(body, Loop{Verdict: v}); return r })
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test"), option.WithMaxRetries(3))
	_, err := client.Responses.New(context.Background(), responses.ResponseNewParams{Model: "gpt-5"})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != DefaultErrorStatus || apiErr.Code != LoopErrorCode || *n != 1 {
		t.Errorf("error %v after %d requests; want a 422 loop_detected, no retry", err, *n)
	}
}

// upstreamUntil returns the fixture's events up to and including the n-th
// whose name contains marker, folded into acc, and the forwarded bytes.
func upstreamUntil(t *testing.T, file, marker string, n int, add func([]byte) error) []byte {
	t.Helper()
	in, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := sse.NewReader(bytes.NewReader(in), 0)
	var out []byte
	for n > 0 {
		e, err := r.Next()
		if err != nil {
			t.Fatalf("fixture ended before %d %s events", n, marker)
		}
		out = append(out, e.Raw...)
		if e.Data != nil {
			_ = add(e.Data)
		}
		if bytes.Contains(e.Name, []byte(marker)) {
			n--
		}
	}
	return out
}

func TestResponsesCutOpenAIGo(t *testing.T) {
	tests := []struct {
		name       string
		marker     string // the stream is forwarded up to the n-th event named so
		n          int
		incomplete bool
		answer     string // ResponsesCut.Answer's text, "" for none
		wantText   string // the final response's output text
		wantItems  int
	}{
		// Cut inside the message: it is closed "incomplete".
		{"open message", "output_text.delta", 2, false, "", `Reading "a.go" and `, 2},
		{"open message incomplete", "output_text.delta", 2, true, "", `Reading "a.go" and `, 2},
		// The first call held back and replaced by loopguard's answer.
		{"answer for a held call", "output_item.done", 2, false, "LOOP_DETECTED: stop", "Reading \"a.go\" and b.go\néLOOP_DETECTED: stop", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var acc sse.ResponsesAccumulator
			stream := upstreamUntil(t, "../sse/testdata/responses/reasoning-text-two-calls.sse", tt.marker, tt.n,
				func(d []byte) error { _, err := acc.Add(d); return err })
			c := ResponsesCut{Category: "token_degeneration", ID: acc.ID(), Model: acc.Model(), CreatedAt: acc.CreatedAt(),
				Sequence: acc.Sequence(), Output: acc.AppendOutput(nil), Incomplete: tt.incomplete}
			if idx, id, text, ok := acc.OpenMessage(); ok {
				c.Open = &OpenMessage{Index: idx, ID: string(id), Text: string(text)}
			}
			if tt.answer != "" {
				c.Answer = &OpenMessage{Index: acc.NextOutputIndex(), ID: "msg_lg", Text: tt.answer}
			}
			stream = AppendResponsesCut(stream, c)
			if !bytes.Contains(stream, []byte("\n: loopguard cut category=token_degeneration\n\n")) {
				t.Errorf("no cut comment in %s", stream)
			}
			srv, _ := serve(t, func([]byte) Response {
				return Response{Status: 200, Header: []Header{{"Content-Type", contentSSE}}, Body: stream}
			})
			client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test"))
			s := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-5"})
			var last responses.ResponseStreamEventUnion
			seq := int64(-1)
			for s.Next() {
				last = s.Current()
				if last.SequenceNumber != seq+1 {
					t.Errorf("sequence_number %d after %d", last.SequenceNumber, seq)
				}
				seq = last.SequenceNumber
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			wantType, wantStatus := "response.completed", responses.ResponseStatusCompleted
			if tt.incomplete {
				wantType, wantStatus = "response.incomplete", responses.ResponseStatusIncomplete
			}
			if last.Type != wantType || last.Response.Status != wantStatus || last.Response.ID != "resp_lg03" ||
				last.Response.OutputText() != tt.wantText || len(last.Response.Output) != tt.wantItems {
				t.Errorf("last event %s = %s", last.Type, last.Response.RawJSON())
			}
		})
	}
}

// FuzzInsertResponses: no panic; a result is valid JSON that still holds
// the text.
func FuzzInsertResponses(f *testing.F) {
	f.Add([]byte(`{"input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`), uint8(0))
	f.Add([]byte(`{"input":"x","instructions":"y"}`), uint8(3))
	f.Add([]byte(`{"input":[{"role":"user","content":[{"type":"input_text","text":"q"}]}]}`), uint8(2))
	fuzzInsert(f, InsertResponses)
}

func fuzzInsert(f *testing.F, insert func([]byte, Placement, string) ([]byte, Placement, error)) {
	places := []Placement{Auto, Tool, User, System}
	f.Fuzz(func(t *testing.T, body []byte, p uint8) {
		out, _, err := insert(body, places[int(p)%len(places)], "NOTE \"x\"")
		if err != nil {
			return
		}
		if !gjson.ValidBytes(out) || !bytes.Contains(out, []byte(`NOTE \"x\"`)) {
			t.Fatalf("insert(%s) = %s", body, out)
		}
	})
}
