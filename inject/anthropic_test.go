package inject

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
)

func TestInsertAnthropic(t *testing.T) {
	results := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}`
	tests := []struct {
		name     string
		give     string
		p        Placement
		want     string
		wantUsed Placement
	}{
		{"auto next to tool_result", `{"messages":[` + results + `]}`, Auto,
			`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"},{"type":"text","text":"NOTE"}]}]}`, Tool},
		{"tool not last", `{"messages":[` + results + `,{"role":"assistant","content":"a"}]}`, Tool,
			`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"},{"type":"text","text":"NOTE"}]},{"role":"assistant","content":"a"}]}`, Tool},
		{"auto after user string", `{"messages":[{"role":"user","content":"hi \u00e9"}]}`, Auto,
			`{"messages":[{"role":"user","content":"hi \u00e9\n\nNOTE"}]}`, User},
		{"auto after assistant", `{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"}]}]}`, Auto,
			`{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"}]},{"role":"user","content":[{"type":"text","text":"NOTE"}]}]}`, User},
		{"tool without results", `{"messages":[]}`, Tool, `{"messages":[{"role":"user","content":[{"type":"text","text":"NOTE"}]}]}`, User},
		{"system string", `{"system":"be brief","messages":[]}`, System, `{"system":"be brief\n\nNOTE","messages":[]}`, System},
		{"system blocks", `{"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[]}`, System,
			`{"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}},{"type":"text","text":"NOTE"}],"messages":[]}`, System},
		{"system absent", `{"model":"claude","messages":[]}`, System, `{"system":"NOTE","model":"claude","messages":[]}`, System},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, used, err := InsertAnthropic([]byte(tt.give), tt.p, "NOTE")
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want || used != tt.wantUsed {
				t.Errorf("InsertAnthropic = %s, %s;\nwant %s, %s", got, used, tt.want, tt.wantUsed)
			}
		})
	}
	for _, give := range []string{`{"model":"x"}`, `{"messages":{}}`, `nope`} {
		if _, _, err := InsertAnthropic([]byte(give), Auto, "x"); err == nil {
			t.Errorf("InsertAnthropic(%s): no error", give)
		}
	}
}

func TestApplyAnthropic(t *testing.T) {
	in := stableInjector(t, Config{Placement: System})
	body := []byte(`{"model":"claude","system":"s","messages":[{"role":"user","content":"x"}]}`)
	res, err := in.ApplyAnthropic(body, Edit{Warnings: []Loop{{Verdict: readVerdict(t, "tool_repetition")}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Placement != System || !strings.HasPrefix(gjson.GetBytes(res.Body, "system").String(), "s\n\n"+Marker) {
		t.Errorf("ApplyAnthropic = %s (%s)", res.Body, res.Placement)
	}
}

func anthropicClient(srvURL string, retries int) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(srvURL), aoption.WithAPIKey("test"), aoption.WithMaxRetries(retries))
}

var anthropicParams = anthropic.MessageNewParams{
	Model: "claude-sonnet-4-5", MaxTokens: 1024,
	Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
}

func TestTerminateAnthropicSDK(t *testing.T) {
	in := stableInjector(t, Config{})
	v := readVerdict(t, "tool_repetition")
	srv, _ := serve(t, func(body []byte) Response {
		res, err := in.TerminateAnthropic(body, Loop{Verdict: v})
		if err != nil {
			t.Error(err)
		}
		return res
	})
	client := anthropicClient(srv.URL, 0)
	msg, err := client.Messages.New(context.Background(), anthropicParams)
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != anthropic.StopReasonEndTurn || len(msg.Content) != 1 || !strings.HasPrefix(msg.Content[0].Text, TerminatePrefix) ||
		string(msg.Model) != "claude-sonnet-4-5" || !strings.HasPrefix(msg.ID, "msg_loopguard_") {
		t.Errorf("message = %s", msg.RawJSON())
	}

	stream := client.Messages.NewStreaming(context.Background(), anthropicParams)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.StopReason != anthropic.StopReasonEndTurn || len(acc.Content) != 1 || acc.Content[0].Text != msg.Content[0].Text {
		t.Errorf("streamed message = %+v", acc)
	}
}

func TestTerminateAnthropicErrorNotRetried(t *testing.T) {
	in := stableInjector(t, Config{TerminateAs: AsError})
	v := readVerdict(t, "tool_repetition")
	srv, n := serve(t, func(body []byte) Response { r, _ := in.TerminateAnthropic(body, Loop{Verdict: v}); return r })
	client := anthropicClient(srv.URL, 3)
	_, err := client.Messages.New(context.Background(), anthropicParams)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != DefaultErrorStatus || *n != 1 ||
		gjson.Get(apiErr.RawJSON(), "error.type").String() != "loop_detected" {
		t.Errorf("error %v after %d requests; want a 422 loop_detected, no retry", err, *n)
	}
}

func TestAnthropicCutSDK(t *testing.T) {
	tests := []struct {
		name, file, marker string
		n                  int
		stop               string
		answer             string // AnthropicCut.Answer, "" for none
		wantText           string
		wantBlocks         int
	}{
		// Cut inside the text block: it is closed, the turn ends.
		{"open text", "../sse/testdata/anthropic/tool-use.sse", "content_block_delta", 1, "", "", "Reading the file.", 1},
		// Cut after the first complete tool_use block.
		{"after tool", "../sse/testdata/anthropic/thinking-two-tools.sse", "content_block_stop", 2, "tool_use", "", "", 2},
		// The first tool_use held back and replaced by loopguard's answer.
		{"answer for a held tool", "../sse/testdata/anthropic/thinking-two-tools.sse", "content_block_stop", 1, "", "LOOP_DETECTED: stop", "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var acc sse.AnthropicAccumulator
			stream := upstreamUntil(t, tt.file, tt.marker, tt.n, func(d []byte) error { _, err := acc.Add(d); return err })
			idx, open := acc.OpenBlock()
			u, _ := acc.Usage()
			stream = AppendAnthropicCut(stream, AnthropicCut{Category: "token_degeneration", OpenBlock: idx, HasOpen: open,
				StopReason: tt.stop, OutputTokens: u.CompletionTokens, Answer: tt.answer, AnswerIndex: acc.NextBlockIndex()})
			srv, _ := serve(t, func([]byte) Response {
				return Response{Status: 200, Header: []Header{{"Content-Type", contentSSE}}, Body: stream}
			})
			client := anthropicClient(srv.URL, 0)
			s := client.Messages.NewStreaming(context.Background(), anthropicParams)
			var msg anthropic.Message
			events := 0
			for s.Next() {
				events++
				if err := msg.Accumulate(s.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			wantStop := anthropic.StopReason(tt.stop)
			if tt.stop == "" {
				wantStop = anthropic.StopReasonEndTurn
			}
			if msg.StopReason != wantStop || len(msg.Content) != tt.wantBlocks || msg.Content[0].Text != tt.wantText ||
				tt.answer != "" && msg.Content[len(msg.Content)-1].Text != tt.answer {
				t.Errorf("after %d events message = %s", events, msg.RawJSON())
			}
		})
	}
}

// FuzzInsertAnthropic: no panic; a result is valid JSON that still holds
// the text.
func FuzzInsertAnthropic(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`), uint8(0))
	f.Add([]byte(`{"system":[{"type":"text","text":"s"}],"messages":[]}`), uint8(3))
	f.Add([]byte(`{"messages":[{"role":"user","content":"q"}]}`), uint8(2))
	fuzzInsert(f, InsertAnthropic)
}
