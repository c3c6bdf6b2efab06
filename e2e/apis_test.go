package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/proxy"
)

// The credentials each client sends; the fake must receive them unchanged.
const (
	openAIKey        = "sk-e2e"
	anthropicKey     = "sk-ant-e2e"
	anthropicVersion = "2023-06-01"
)

// apiCase is one of the two non-chat APIs loopguard guards, with what the
// tests need to drive and judge it.
type apiCase struct {
	name string
	// agents are the real clients that speak it.
	agents func(t *testing.T) map[string]agentFunc
	// looping is the fake upstream of a model that keeps calling make build.
	looping func() fakellm.Rule
	// placed reports whether body carries text at auto placement: the
	// last function_call_output (Responses), or a text block after the
	// tool_result blocks of the last user turn (Anthropic).
	placed func(body []byte, text string) bool
	// history is the body's member holding the history; paired checks
	// that each call in it has its result and each result its call.
	history string
	paired  func(body []byte) error
	// finish is what a completed answer's status/stop_reason reads.
	finish string
	// auth checks the credentials the fake received.
	auth func(h http.Header) error
}

func apiCases() []apiCase {
	return []apiCase{
		{
			name:   "responses",
			agents: responsesAgents,
			looping: func() fakellm.Rule {
				return responsesModel(func(*fakellm.Request) fakellm.ResponsesAnswer { return loopAnswerResponses })
			},
			placed:  placedResponses,
			history: "input",
			paired:  pairedResponses,
			finish:  "completed",
			auth: func(h http.Header) error {
				if got := h.Get("Authorization"); got != "Bearer "+openAIKey {
					return fmt.Errorf("Authorization = %q", got)
				}
				return nil
			},
		},
		{
			name:   "anthropic",
			agents: func(*testing.T) map[string]agentFunc { return map[string]agentFunc{"anthropic-sdk-go": anthropicAgent} },
			looping: func() fakellm.Rule {
				return anthropicModel(func(*fakellm.Request) fakellm.AnthropicAnswer { return loopAnswerAnthropic })
			},
			placed:  placedAnthropic,
			history: "messages",
			paired:  pairedAnthropic,
			finish:  "end_turn",
			auth: func(h http.Header) error {
				if h.Get("X-Api-Key") != anthropicKey || h.Get("Anthropic-Version") != anthropicVersion {
					return fmt.Errorf("X-Api-Key = %q, Anthropic-Version = %q", h.Get("X-Api-Key"), h.Get("Anthropic-Version"))
				}
				return nil
			},
		},
	}
}

var (
	loopAnswerResponses = fakellm.ResponsesAnswer{Calls: []fakellm.ToolCall{makeBuild}}
	loopAnswerAnthropic = fakellm.AnthropicAnswer{Calls: []fakellm.ToolCall{makeBuild}}
)

func responsesModel(f func(*fakellm.Request) fakellm.ResponsesAnswer) fakellm.Rule {
	return fakellm.ResponsesRule(f)
}

func anthropicModel(f func(*fakellm.Request) fakellm.AnthropicAnswer) fakellm.Rule {
	return fakellm.AnthropicRule(f)
}

func responsesAgents(t *testing.T) map[string]agentFunc {
	as := map[string]agentFunc{"openai-go": responsesAgent}
	if node := nodeOrSkip(t); node != "" {
		as["node-openai"] = func(t *testing.T, base string, o agentOpts) agentRun { return nodeAPIAgent(t, node, base, o) }
	}
	return as
}

// placedResponses: the last input item is a function_call_output whose
// output holds text.
func placedResponses(body []byte, text string) bool {
	last := gjson.GetBytes(body, "input.@reverse.0")
	out := last.Get("output")
	return last.Get("type").String() == "function_call_output" && (strings.Contains(out.String(), text) || strings.Contains(out.Raw, text))
}

// placedAnthropic: the last message is the user turn of tool results and
// its last block is a text block holding text, after the tool_result ones
// (and, in a collapsed history, the note on them).
func placedAnthropic(body []byte, text string) bool {
	last := gjson.GetBytes(body, "messages.@reverse.0")
	blocks := last.Get("content").Array()
	if last.Get("role").String() != "user" || len(blocks) < 2 {
		return false
	}
	b := blocks[len(blocks)-1]
	return b.Get("type").String() == "text" && strings.Contains(b.Get("text").String(), text) &&
		blocks[0].Get("type").String() == "tool_result"
}

// pairedResponses: every function_call has one function_call_output after
// it, and every output answers a call before it.
func pairedResponses(body []byte) error {
	calls := map[string]int{} // call_id -> 1 called, 2 answered
	for i, it := range gjson.GetBytes(body, "input").Array() {
		id := it.Get("call_id").String()
		switch it.Get("type").String() {
		case "function_call":
			calls[id]++
		case "function_call_output":
			if calls[id] != 1 {
				return fmt.Errorf("item %d answers %q, called %d times before", i, id, calls[id])
			}
			calls[id] = 2
		}
	}
	for id, n := range calls {
		if n != 2 {
			return fmt.Errorf("call %q without its output", id)
		}
	}
	return nil
}

// pairedAnthropic: the tool_result blocks of each message answer exactly
// the tool_use blocks of the message before it, and roles alternate.
func pairedAnthropic(body []byte) error {
	var prevRole, calls string
	for i, m := range gjson.GetBytes(body, "messages").Array() {
		role := m.Get("role").String()
		if role == prevRole {
			return fmt.Errorf("message %d: two %s turns in a row", i, role)
		}
		results := ""
		for _, b := range m.Get("content.#(type==\"tool_result\")#.tool_use_id").Array() {
			results += b.String() + ","
		}
		if results != calls {
			return fmt.Errorf("message %d answers %q; the turn before called %q", i, results, calls)
		}
		calls = ""
		for _, b := range m.Get("content.#(type==\"tool_use\")#.id").Array() {
			calls += b.String() + ","
		}
		prevRole = role
	}
	if calls != "" {
		return fmt.Errorf("calls %q without results", calls)
	}
	return nil
}

// --- the Go clients ---

// fillTurn copies what an SDK call returned into a turn: the exact body
// the client sent (from the recorder) and loopguard's headers.
func fillTurn(rec *recorder, httpResp *http.Response, err error) agentTurn {
	tr := agentTurn{Body: rec.last().Body}
	if httpResp != nil {
		tr.Status = httpResp.StatusCode
		tr.Action, tr.Loop = httpResp.Header.Get(proxy.HeaderAction), httpResp.Header.Get(proxy.HeaderLoop)
		tr.Session = httpResp.Header.Get(proxy.HeaderSession)
	}
	if err != nil {
		tr.Err = err.Error()
	}
	return tr
}

// responsesAgent is the agent loop on openai-go's Responses API: system
// text goes to instructions, calls and results are function_call and
// function_call_output items.
func responsesAgent(t *testing.T, base string, o agentOpts) agentRun {
	return responsesAgentAs(t, base, o, "")
}

// responsesAgentAs is responsesAgent with the body's "user" set to user
// when it is not empty; o.session "" sends no session header.
func responsesAgentAs(t *testing.T, base string, o agentOpts, user string) agentRun {
	t.Helper()
	rec := newRecorder(t, "")
	opts := []option.RequestOption{
		option.WithBaseURL(base + "/v1/"),
		option.WithAPIKey(openAIKey),
		option.WithMaxRetries(o.retries),
		option.WithHTTPClient(&http.Client{Transport: rec}),
	}
	if o.session != "" {
		opts = append(opts, option.WithHeader("X-Session-ID", o.session))
	}
	client := oai.NewClient(opts...)
	var tools []responses.ToolUnionParam
	for _, n := range agentTools {
		tools = append(tools, responses.ToolParamOfFunction(n, map[string]any{"type": "object", "properties": map[string]any{}}, false))
	}
	step := func(hist []histMsg) agentTurn {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		params := responses.ResponseNewParams{Model: "fake-model", Tools: tools}
		if user != "" {
			params.User = oai.String(user)
		}
		var items responses.ResponseInputParam
		for _, m := range hist {
			switch m.Role {
			case "system":
				params.Instructions = oai.String(m.Content)
			case "user":
				items = append(items, responses.ResponseInputItemParamOfMessage(m.Content, responses.EasyInputMessageRoleUser))
			case "assistant":
				if m.Content != "" {
					items = append(items, responses.ResponseInputItemParamOfMessage(m.Content, responses.EasyInputMessageRoleAssistant))
				}
				for _, c := range m.Calls {
					items = append(items, responses.ResponseInputItemParamOfFunctionCall(c.Args, c.ID, c.Name))
				}
			case "tool":
				it := responses.ResponseInputItemParamOfFunctionCallOutput(m.Content)
				it.OfFunctionCallOutput.CallID = oai.String(m.CallID)
				items = append(items, it)
			}
		}
		params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: items}
		var httpResp *http.Response
		var final *responses.Response
		var streamed strings.Builder
		var err error
		if !o.stream {
			final, err = client.Responses.New(ctx, params, option.WithResponseInto(&httpResp))
		} else {
			st := client.Responses.NewStreaming(ctx, params, option.WithResponseInto(&httpResp))
			for st.Next() {
				ev := st.Current()
				switch ev.Type {
				case "response.output_text.delta":
					streamed.WriteString(ev.Delta)
				case "response.completed":
					r := ev.Response
					final = &r
				}
			}
			err = st.Err()
			st.Close()
		}
		tr := fillTurn(rec, httpResp, err)
		if err != nil {
			return tr
		}
		if final == nil {
			tr.Err = "stream ended without response.completed"
			return tr
		}
		tr.Content, tr.Finish = final.OutputText(), string(final.Status)
		if o.stream && streamed.String() != tr.Content {
			tr.Err = fmt.Sprintf("streamed text %q differs from the completed response's %q", streamed.String(), tr.Content)
		}
		for _, it := range final.Output {
			if it.Type == "function_call" {
				fc := it.AsFunctionCall()
				tr.Calls = append(tr.Calls, toolCall{fc.CallID, fc.Name, fc.Arguments})
			}
		}
		tr.Usage = &usage{final.Usage.InputTokens, final.Usage.OutputTokens, final.Usage.TotalTokens}
		return tr
	}
	turns := runAgent(o, step)
	return agentRun{Turns: turns, Requests: len(rec.all())}
}

// anthropicAgent is the agent loop on anthropic-sdk-go's Messages API:
// system text goes to system, calls are tool_use blocks and the results of
// one turn are tool_result blocks of one user message. A streamed answer is
// rebuilt with Message.Accumulate.
func anthropicAgent(t *testing.T, base string, o agentOpts) agentRun {
	return anthropicAgentAs(t, base, o, "")
}

// anthropicAgentAs is anthropicAgent with metadata.user_id set to user
// when it is not empty; o.session "" sends no session header.
func anthropicAgentAs(t *testing.T, base string, o agentOpts, user string) agentRun {
	t.Helper()
	rec := newRecorder(t, "")
	opts := []aoption.RequestOption{
		aoption.WithBaseURL(base),
		aoption.WithAPIKey(anthropicKey),
		aoption.WithMaxRetries(o.retries),
		aoption.WithHTTPClient(&http.Client{Transport: rec}),
	}
	if o.session != "" {
		opts = append(opts, aoption.WithHeader("X-Session-ID", o.session))
	}
	client := anthropic.NewClient(opts...)
	var tools []anthropic.ToolUnionParam
	for _, n := range agentTools {
		tools = append(tools, anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{Properties: map[string]any{}}, n))
	}
	step := func(hist []histMsg) agentTurn {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024, Tools: tools}
		if user != "" {
			params.Metadata.UserID = anthropic.String(user)
		}
		var results []anthropic.ContentBlockParamUnion
		flush := func() {
			if len(results) > 0 {
				params.Messages = append(params.Messages, anthropic.NewUserMessage(results...))
				results = nil
			}
		}
		for _, m := range hist {
			if m.Role != "tool" {
				flush()
			}
			switch m.Role {
			case "system":
				params.System = []anthropic.TextBlockParam{{Text: m.Content}}
			case "user":
				params.Messages = append(params.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(m.Content)))
			case "assistant":
				var blocks []anthropic.ContentBlockParamUnion
				if m.Content != "" {
					blocks = append(blocks, anthropic.NewTextBlock(m.Content))
				}
				for _, c := range m.Calls {
					blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, json.RawMessage(c.Args), c.Name))
				}
				params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
			case "tool":
				failed := strings.Contains(m.Content, "FAIL") || strings.Contains(m.Content, "exit code")
				results = append(results, anthropic.NewToolResultBlock(m.CallID, m.Content, failed))
			}
		}
		flush()
		var httpResp *http.Response
		var msg anthropic.Message
		var err error
		if !o.stream {
			var m *anthropic.Message
			m, err = client.Messages.New(ctx, params, aoption.WithResponseInto(&httpResp))
			if m != nil {
				msg = *m
			}
		} else {
			st := client.Messages.NewStreaming(ctx, params, aoption.WithResponseInto(&httpResp))
			for st.Next() {
				if aerr := msg.Accumulate(st.Current()); aerr != nil && err == nil {
					err = fmt.Errorf("Accumulate: %w", aerr)
				}
			}
			if err == nil {
				err = st.Err()
			}
			st.Close()
		}
		tr := fillTurn(rec, httpResp, err)
		if err != nil {
			return tr
		}
		tr.Finish = string(msg.StopReason)
		for _, b := range msg.Content {
			switch b.Type {
			case "text":
				tr.Content += b.Text
			case "tool_use":
				tr.Calls = append(tr.Calls, toolCall{b.ID, b.Name, string(b.Input)})
			}
		}
		tr.Usage = &usage{msg.Usage.InputTokens, msg.Usage.OutputTokens, msg.Usage.InputTokens + msg.Usage.OutputTokens}
		return tr
	}
	turns := runAgent(o, step)
	return agentRun{Turns: turns, Requests: len(rec.all())}
}

// nodeAPIAgent runs node/apis.mjs: the looping agent (or, with maxTurns 0,
// one degenerate stream) on the npm client's Responses API.
func nodeAPIAgent(t *testing.T, node, base string, o agentOpts) agentRun {
	t.Helper()
	if o.result != nil || o.start != nil {
		t.Fatal("apis.mjs plays only the looping agent")
	}
	mode := "nonstream"
	if o.stream {
		mode = "stream"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "apis.mjs", base+"/v1", mode, o.session, fmt.Sprint(o.maxTurns))
	cmd.Dir = nodeDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node apis.mjs: %v\nstderr: %s", err, stderr.String())
	}
	var sum nodeLadder
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("node summary %q: %v", stdout.String(), err)
	}
	run := agentRun{Requests: sum.Fetches}
	for _, r := range sum.Turns {
		tr := agentTurn{Body: []byte(r.Body), Status: r.Status, Action: deref(r.Action), Loop: deref(r.Loop),
			Session: deref(r.Session), Content: r.Content, Finish: deref(r.Finish), Calls: r.Calls}
		if r.Usage != nil {
			tr.Usage = &usage{r.Usage.Prompt, r.Usage.Completion, r.Usage.Total}
		}
		if e := r.Error; e != nil {
			tr.Err = e.Name + ": " + e.Message
		}
		run.Turns = append(run.Turns, tr)
	}
	return run
}

// --- the ladder ---

// checkAPILadder asserts a looping agent's run in a non-chat API: none
// until warn, then constrain, then terminate; the upstream got the client's
// bytes plus one inserted run at the placement, and at constrain a history
// collapsed with every call still paired; the last answer is loopguard's
// own LOOP_DETECTED.
func checkAPILadder(t *testing.T, api apiCase, run agentRun, ups []fakellm.Request, session string, stream bool) {
	t.Helper()
	turns := run.Turns
	var actions []string
	for _, tr := range turns {
		actions = append(actions, tr.Action)
	}
	w := -1
	for i, a := range actions {
		if a != "none" {
			w = i
			break
		}
	}
	if w < 1 || len(actions) != w+3 || actions[w] != "warn" || actions[w+1] != "constrain" || actions[w+2] != "terminate" {
		last := turns[len(turns)-1]
		t.Fatalf("actions = %q; want none at least once, then warn, constrain, terminate and the end (last error %q)", actions, last.Err)
	}
	if len(ups) != len(turns)-1 {
		t.Errorf("upstream got %d requests for %d turns; want one per turn but the terminated one", len(ups), len(turns))
	}
	for i, tr := range turns {
		if tr.Session != session {
			t.Errorf("turn %d: %s = %q; want %q", i, proxy.HeaderSession, tr.Session, session)
		}
		if (i >= w) != (tr.Loop != "") {
			t.Errorf("turn %d (%s): %s = %q", i, tr.Action, proxy.HeaderLoop, tr.Loop)
		}
		if i >= len(ups) {
			continue
		}
		up := ups[i]
		if up.Stream != stream {
			t.Errorf("turn %d: upstream saw stream=%v", i, up.Stream)
		}
		if err := api.auth(up.Header); err != nil {
			t.Errorf("turn %d: upstream credentials: %v", i, err)
		}
		text := map[string]string{"warn": inject.Marker, "constrain": inject.RecoveryTag}[tr.Action]
		if text == "" {
			if !bytes.Equal(up.Body, tr.Body) {
				t.Errorf("turn %d (none): upstream body differs from the client's: %s", i, firstDiff(tr.Body, up.Body))
			}
			continue
		}
		if tr.Action == "constrain" {
			n, m := gjson.GetBytes(tr.Body, api.history+".#").Int(), gjson.GetBytes(up.Body, api.history+".#").Int()
			if m >= n {
				t.Errorf("turn %d (constrain): upstream got %d history elements, client sent %d; want the loop collapsed", i, m, n)
			}
			if err := api.paired(up.Body); err != nil {
				t.Errorf("turn %d (constrain): collapsed history: %v\n%s", i, err, up.Body)
			}
		} else if ins, ok := insertion(tr.Body, up.Body); !ok {
			t.Errorf("turn %d (%s): upstream body is not the client's plus one insertion: %s", i, tr.Action, firstDiff(tr.Body, up.Body))
		} else if !bytes.Contains(ins, []byte(text)) {
			t.Errorf("turn %d (%s): inserted %q; want %s", i, tr.Action, ins, text)
		}
		if !api.placed(up.Body, text) {
			t.Errorf("turn %d (%s): %s not at the placement: %s", i, tr.Action, text, up.Body)
		}
	}
	last := turns[len(turns)-1]
	if last.Err != "" || last.Status != http.StatusOK {
		t.Fatalf("terminate: status %d, client error %q; want a normal answer", last.Status, last.Err)
	}
	if !strings.HasPrefix(last.Content, inject.TerminatePrefix) || last.Finish != api.finish || len(last.Calls) != 0 {
		t.Errorf("terminate: text %q, finish %q, calls %v; want %s..., %s, none", last.Content, last.Finish, last.Calls, inject.TerminatePrefix, api.finish)
	}
}

// TestAPIsLadderRealClients: a looping agent on each real client of the
// Responses and Anthropic Messages APIs, streaming or not, climbs none.. ->
// warn -> constrain -> terminate, and the upstream sees the client's bytes
// plus loopguard's text only.
func TestAPIsLadderRealClients(t *testing.T) {
	for _, api := range apiCases() {
		for name, agent := range api.agents(t) {
			for _, stream := range []bool{false, true} {
				mode := map[bool]string{true: "stream", false: "json"}[stream]
				t.Run(api.name+"/"+name+"/"+mode, func(t *testing.T) {
					t.Parallel()
					fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{api.looping()}})
					lg := startLoopguard(t, fake.URL(), nil)
					session := "ladder-" + api.name + "-" + name + "-" + mode
					run := agent(t, lg.URL, agentOpts{session: session, stream: stream, maxTurns: 10})
					checkAPILadder(t, api, run, fake.Requests(), session, stream)
					if evs := lg.waitEvents(t, run.Requests); len(evs) != run.Requests {
						t.Errorf("proxy reported %d requests; the client made %d", len(evs), run.Requests)
					}
				})
			}
		}
	}
}

// TestAPIsSessionFromBody: without a session header the session is the
// body's own id (Responses "user", Anthropic metadata.user_id), and the
// ladder climbs in it all the same.
func TestAPIsSessionFromBody(t *testing.T) {
	for _, api := range apiCases() {
		agent := map[string]func(*testing.T, string, agentOpts, string) agentRun{
			"responses": responsesAgentAs, "anthropic": anthropicAgentAs}[api.name]
		t.Run(api.name, func(t *testing.T) {
			t.Parallel()
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{api.looping()}})
			lg := startLoopguard(t, fake.URL(), nil)
			const user = "agent-7f3a"
			run := agent(t, lg.URL, agentOpts{stream: true, maxTurns: 10}, user)
			checkAPILadder(t, api, run, fake.Requests(), user, true)
			for i, up := range fake.Requests() {
				if up.Header.Get("X-Session-ID") != "" {
					t.Errorf("request %d carried a session header", i)
				}
			}
		})
	}
}

// --- the healthy agent ---

// apiHealthyTurns is the healthy agent's run length in these APIs.
const apiHealthyTurns = 30

// TestAPIsHealthyAgentUntouched: an agent that makes progress (different
// files, tests re-run after different edits with changing results) is
// never touched in either API, streaming or not: every upstream body is
// the client's, byte for byte, and every answer says none.
func TestAPIsHealthyAgentUntouched(t *testing.T) {
	// k is the number of tool results the request carries.
	step := func(k int) (string, []fakellm.ToolCall) {
		if k >= apiHealthyTurns {
			return "All tests pass now; the handlers return their errors.", nil
		}
		return fmt.Sprintf("Step %d.", k), []fakellm.ToolCall{healthyCall(k)}
	}
	tests := []struct {
		name  string
		agent agentFunc
		model fakellm.Rule
	}{
		{"responses/openai-go", responsesAgent, fakellm.ResponsesRule(func(r *fakellm.Request) fakellm.ResponsesAnswer {
			text, calls := step(int(gjson.GetBytes(r.Body, `input.#(type=="function_call_output")#`).Get("#").Int()))
			return fakellm.ResponsesAnswer{Text: text, Calls: calls}
		})},
		{"anthropic/anthropic-sdk-go", anthropicAgent, fakellm.AnthropicRule(func(r *fakellm.Request) fakellm.AnthropicAnswer {
			text, calls := step(int(gjson.GetBytes(r.Body, `messages.#.content.#(type=="tool_result")#`).Get("@flatten.#").Int()))
			return fakellm.AnthropicAnswer{Text: text, Calls: calls}
		})},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			mode := map[bool]string{true: "stream", false: "json"}[stream]
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{tt.model}})
				lg := startLoopguard(t, fake.URL(), nil)
				start := []histMsg{
					{Role: "system", Content: "You are a coding agent."},
					{Role: "user", Content: "Make every handler return its error and get the tests green."},
				}
				run := tt.agent(t, lg.URL, agentOpts{session: "healthy-" + mode, stream: stream, maxTurns: apiHealthyTurns + 5,
					result: healthyEnv(), start: start})
				if len(run.Turns) != apiHealthyTurns+1 {
					last := run.Turns[len(run.Turns)-1]
					t.Errorf("agent ran %d turns; want %d (last: action %q, loop %q, error %q, text %.200q)",
						len(run.Turns), apiHealthyTurns+1, last.Action, last.Loop, last.Err, last.Content)
				}
				ups := fake.Requests()
				if len(ups) != len(run.Turns) {
					t.Errorf("upstream got %d requests for %d turns", len(ups), len(run.Turns))
				}
				xs := fake.Exchanges()
				for i, tr := range run.Turns {
					if tr.Err != "" || tr.Action != "none" || tr.Loop != "" || (i < apiHealthyTurns && len(tr.Calls) != 1) {
						t.Errorf("turn %d: error %q, %s = %q, %s = %q, %d calls; want none and one call", i, tr.Err,
							proxy.HeaderAction, tr.Action, proxy.HeaderLoop, tr.Loop, len(tr.Calls))
					}
					if i < len(ups) && !bytes.Equal(ups[i].Body, tr.Body) {
						t.Errorf("turn %d: upstream body differs from the client's: %s", i, firstDiff(tr.Body, ups[i].Body))
					}
					if i < len(xs) && xs[i].PeerClosed {
						t.Errorf("turn %d: loopguard closed the upstream answer early", i)
					}
				}
				for i, e := range lg.waitEvents(t, len(run.Turns)) {
					if e.Action != "none" || e.FailOpen != "" || e.Cut != "" {
						t.Errorf("event %d = %+v; want nothing done", i, e)
					}
				}
			})
		}
	}
}

// --- transparency ---

// apiRequest is a raw request of a non-looping agent (one call, one
// result) in each API.
var apiRequest = map[string]string{
	"responses": `{"model":"gpt-4.1","instructions":"You are an agent.","input":[{"role":"user","content":"Read the config."},` +
		`{"type":"function_call","call_id":"call_a","name":"read_file","arguments":"{\"path\":\"config.toml\"}"},` +
		`{"type":"function_call_output","call_id":"call_a","output":"port = 8080\n"}],"tools":[{"type":"function","name":"read_file","parameters":{"type":"object"}}],"unknown_field":{"kept":[1,2.50,"\u00e9"]}%s}`,
	"anthropic": `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"You are an agent.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"Read the config."},` +
		`{"role":"assistant","content":[{"type":"text","text":"Reading."},{"type":"tool_use","id":"toolu_a","name":"read_file","input":{"path":"config.toml"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"port = 8080\n"}]}],"metadata":{"user_id":"u-1"},"unknown_field":{"kept":[1,2.50,"\u00e9"]}%s}`,
}

// apiHeaders are the credentials each API's clients send.
var apiHeaders = map[string]map[string]string{
	"responses": {"Authorization": "Bearer " + openAIKey, "OpenAI-Organization": "org-e2e"},
	"anthropic": {"X-Api-Key": anthropicKey, "Anthropic-Version": anthropicVersion, "Anthropic-Beta": "tools-2024-05-16"},
}

var apiPath = map[string]string{"responses": "/v1/responses", "anthropic": "/v1/messages"}

// postAPI sends body to path with headers through a plain HTTP client and
// reads the whole answer.
func postAPI(t *testing.T, url, body string, hdr map[string]string) rawExchange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: newTransport(t)}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return rawExchange{resp.StatusCode, resp.Header, buf.Bytes()}
}

// TestAPIsTransparent: requests without a loop and every kind of answer
// (text, calls, an in-band error, a rejected request), streamed or not,
// pass loopguard byte for byte both ways, credentials included.
func TestAPIsTransparent(t *testing.T) {
	call := fakellm.ToolCall{Name: "read_file", Arguments: `{"path":"main.go"}`}
	answers := []struct {
		name string
		resp fakellm.ResponsesAnswer
		anth fakellm.AnthropicAnswer
	}{
		{"text", fakellm.ResponsesAnswer{Text: "The port is 8080 <ok> & \"fine\" \u00e9."}, fakellm.AnthropicAnswer{Text: "The port is 8080 <ok> & \"fine\" \u00e9."}},
		{"calls", fakellm.ResponsesAnswer{Text: "Next.", Calls: []fakellm.ToolCall{call, makeBuild}, ChunkSize: 3},
			fakellm.AnthropicAnswer{Text: "Next.", Calls: []fakellm.ToolCall{call, makeBuild}, ChunkSize: 3}},
		{"error", fakellm.ResponsesAnswer{Text: "Partial answer here", ChunkSize: 4, Error: "The server had an error", ErrorAfter: 6},
			fakellm.AnthropicAnswer{Text: "Partial answer here", ChunkSize: 4, Error: "Overloaded", ErrorAfter: 5}},
		{"rejected", fakellm.ResponsesAnswer{Status: http.StatusTooManyRequests, Error: "Rate limit reached"},
			fakellm.AnthropicAnswer{Status: http.StatusTooManyRequests, Error: "Rate limit reached"}},
	}
	for _, api := range []string{"responses", "anthropic"} {
		for _, a := range answers {
			for _, stream := range []bool{false, true} {
				mode := map[bool]string{true: "stream", false: "json"}[stream]
				t.Run(api+"/"+a.name+"/"+mode, func(t *testing.T) {
					t.Parallel()
					fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
						fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return a.resp }),
						fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer { return a.anth }),
					}})
					lg := startLoopguard(t, fake.URL(), nil)
					body := fmt.Sprintf(apiRequest[api], map[bool]string{true: `,"stream":true`, false: ""}[stream])
					hdr := map[string]string{"X-Session-ID": "transparent-" + api}
					for k, v := range apiHeaders[api] {
						hdr[k] = v
					}
					got := postAPI(t, lg.URL+apiPath[api], body, hdr)
					x := waitExchange(t, fake, 0, testTimeout)
					if string(x.Request.Body) != body {
						t.Errorf("upstream body changed: %s", firstDiff([]byte(body), x.Request.Body))
					}
					for k, v := range apiHeaders[api] {
						if g := x.Request.Header.Values(k); len(g) != 1 || g[0] != v {
							t.Errorf("upstream %s = %q; want [%q]", k, g, v)
						}
					}
					if got.status != x.Status || got.header.Get("Content-Type") != x.Header.Get("Content-Type") {
						t.Errorf("answer %d %q; upstream sent %d %q", got.status, got.header.Get("Content-Type"), x.Status, x.Header.Get("Content-Type"))
					}
					if !bytes.Equal(got.body, x.Body) {
						t.Errorf("answer changed on the way: %s", firstDiff(x.Body, got.body))
					}
					if len(x.Body) == 0 || x.PeerClosed {
						t.Errorf("upstream sent %d bytes, peer closed %v", len(x.Body), x.PeerClosed)
					}
					if a := got.header.Get(proxy.HeaderAction); a != "none" {
						t.Errorf("%s = %q; want none", proxy.HeaderAction, a)
					}
				})
			}
		}
	}
}

// --- stream cuts ---

// endlessDegenerateFake is a fake model whose Responses and Anthropic
// answers repeat degenerateSentence until the client hangs up.
func endlessDegenerateFake(t *testing.T) *fakellm.Server {
	return fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
		fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
			return fakellm.ResponsesAnswer{Text: degenerateSentence, NeverEnd: true}
		}),
		fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
			return fakellm.AnthropicAnswer{Text: degenerateSentence, NeverEnd: true}
		}),
	}})
}

// TestAPIsStreamCutRealClients: a never-ending degenerate text stream in
// each API is cut; each client's stream reader ends without error with the
// repeated text (openai-go's response.completed, anthropic-sdk-go's
// Accumulate); the fake sees the hang-up while it still had events to send.
// With stream.tail = "trim" the client's text ends where the repetition
// began (at most one copy), and the Responses answer's final output says
// the same text the client streamed.
func TestAPIsStreamCutRealClients(t *testing.T) {
	type client struct {
		api   string
		name  string
		agent agentFunc
	}
	clients := []client{{"responses", "openai-go", responsesAgent}, {"anthropic", "anthropic-sdk-go", anthropicAgent}}
	if node := nodeOrSkip(t); node != "" {
		clients = append(clients, client{"responses", "node-openai", func(t *testing.T, base string, o agentOpts) agentRun {
			return nodeAPIAgent(t, node, base, o)
		}})
	}
	for _, c := range clients {
		for _, tail := range []string{proxy.TailKeep, proxy.TailTrim} {
			t.Run(c.api+"/"+c.name+"/"+tail, func(t *testing.T) {
				t.Parallel()
				fake := endlessDegenerateFake(t)
				lg := startLoopguard(t, fake.URL(), func(cfg *proxy.Config) { cfg.Stream.Tail = tail })
				start := time.Now()
				run := c.agent(t, lg.URL, agentOpts{session: "cut-" + c.api + "-" + c.name + "-" + tail, stream: true, maxTurns: 1})
				if len(run.Turns) != 1 {
					t.Fatalf("%d turns; want 1", len(run.Turns))
				}
				tr := run.Turns[0]
				if tr.Err != "" {
					t.Fatalf("client error on the cut stream: %s", tr.Err)
				}
				if tail == proxy.TailKeep && !isRepetitionOf(tr.Content, degenerateSentence) || len(tr.Calls) != 0 {
					t.Errorf("client parsed text %.120q, calls %v; want the repeated sentence", tr.Content, tr.Calls)
				}
				if n := strings.Count(tr.Content, degenerateSentence); tail == proxy.TailTrim && (n > 1 || !strings.HasPrefix(degenerateSentence, tr.Content) && n == 0) {
					t.Errorf("trim: client parsed text %.200q; want at most one copy of the sentence", tr.Content)
				}
				wantFinish := map[string]string{"responses": "completed", "anthropic": "end_turn"}[c.api]
				if tr.Finish != wantFinish {
					t.Errorf("client parsed finish %q; want %q", tr.Finish, wantFinish)
				}
				x := waitExchange(t, fake, 0, cutBound)
				if !x.PeerClosed || x.Unsent <= 0 {
					t.Errorf("upstream exchange: PeerClosed %v, Unsent %d; want closed with events left", x.PeerClosed, x.Unsent)
				}
				if lag := x.ClosedAt.Sub(start); lag > cutBound {
					t.Errorf("upstream saw the close %v after the request; want within %v", lag, cutBound)
				}
				if evs := lg.waitEvents(t, 1); evs[0].Cut != "token_degeneration" {
					t.Errorf("event = %+v; want a token_degeneration cut", evs[0])
				}
			})
		}
	}
}

// TestAPIsStreamCutRawEnding checks the cut stream's bytes: the upstream's
// events unchanged up to the cut, then the comment and the API's closing
// events in order.
func TestAPIsStreamCutRawEnding(t *testing.T) {
	tests := []struct {
		api     string
		wantEnd []string
	}{
		{"responses", []string{": loopguard cut category=token_degeneration", "event: response.output_text.done",
			"event: response.content_part.done", "event: response.output_item.done", "event: response.completed"}},
		{"anthropic", []string{": loopguard cut category=token_degeneration", "event: content_block_stop",
			"event: message_delta", "event: message_stop"}},
	}
	for _, tt := range tests {
		t.Run(tt.api, func(t *testing.T) {
			t.Parallel()
			fake := endlessDegenerateFake(t)
			lg := startLoopguard(t, fake.URL(), nil)
			got := postAPI(t, lg.URL+apiPath[tt.api], fmt.Sprintf(apiRequest[tt.api], `,"stream":true`), apiHeaders[tt.api])
			x := waitExchange(t, fake, 0, cutBound)
			cut := bytes.Index(got.body, []byte(": loopguard cut"))
			if cut < 0 {
				t.Fatalf("no cut comment in %q", got.body[max(0, len(got.body)-2000):])
			}
			// Every byte before the cut came from the upstream unchanged,
			// event by event (the tail may hold back part of the last text).
			if head := got.body[:cut]; !bytes.HasPrefix(x.Body, head[:bytes.LastIndex(head[:len(head)-1], []byte("\n\n"))+2]) {
				t.Errorf("stream before the cut differs from the upstream's: %s", firstDiff(x.Body, head))
			}
			tail := string(got.body[cut:])
			last := -1
			for _, want := range tt.wantEnd {
				i := strings.Index(tail, want)
				if i < 0 || i < last {
					t.Errorf("stream end lacks %q in order:\n%s", want, tail)
				}
				last = i
			}
			if !strings.HasSuffix(tail, "\n\n") {
				t.Errorf("stream does not end with a complete event: %q", tail[max(0, len(tail)-200):])
			}
		})
	}
}

// TestAPIsDuplicateCallBurst: a streamed answer that repeats one call eight
// times is cut as tool_repetition; the stream must still end well-formed
// (every output item or content block that was opened is closed) and the
// calls the client parses must be the complete ones it was shown.
func TestAPIsDuplicateCallBurst(t *testing.T) {
	burst := make([]fakellm.ToolCall, 8)
	for i := range burst {
		burst[i] = makeBuild
	}
	for _, api := range []string{"responses", "anthropic"} {
		t.Run(api, func(t *testing.T) {
			t.Parallel()
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
				fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
					return fakellm.ResponsesAnswer{Calls: burst, Delay: time.Millisecond}
				}),
				fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
					return fakellm.AnthropicAnswer{Calls: burst, Delay: time.Millisecond}
				}),
			}})
			lg := startLoopguard(t, fake.URL(), nil)
			got := postAPI(t, lg.URL+apiPath[api], fmt.Sprintf(apiRequest[api], `,"stream":true`), apiHeaders[api])
			if x := waitExchange(t, fake, 0, testTimeout); !x.PeerClosed || x.Unsent <= 0 {
				t.Errorf("upstream exchange: PeerClosed %v, Unsent %d; want the burst cut off", x.PeerClosed, x.Unsent)
			}
			if evs := lg.waitEvents(t, 1); evs[0].Cut != "tool_repetition" {
				t.Fatalf("event = %+v; want a tool_repetition cut", evs[0])
			}
			opened, closed, parsed := apiStreamItems(t, got.body, api)
			if opened != closed {
				t.Errorf("stream opened %d items/blocks and closed %d: %s", opened, closed, got.body[max(0, len(got.body)-1500):])
			}
			if parsed != closed || parsed < 1 {
				t.Errorf("final answer lists %d calls; the stream completed %d", parsed, closed)
			}
		})
	}
}

// apiStreamItems counts the output items (Responses) or content blocks
// (Anthropic) a stream opened and closed, and the calls of its final
// answer (response.completed's output; Anthropic: the closed tool_use
// blocks, which is what Message.Accumulate keeps).
func apiStreamItems(t *testing.T, body []byte, api string) (opened, closed, calls int) {
	t.Helper()
	for _, fr := range strings.Split(string(body), "\n\n") {
		_, data, ok := strings.Cut(fr, "data: ")
		if !ok {
			continue
		}
		d := gjson.Parse(data)
		switch d.Get("type").String() {
		case "response.output_item.added", "content_block_start":
			opened++
		case "response.output_item.done", "content_block_stop":
			closed++
		case "response.completed":
			calls = int(d.Get(`response.output.#(type=="function_call")#|#`).Int())
		}
	}
	if api == "anthropic" {
		calls = closed
	}
	return opened, closed, calls
}

// TestAPIsNonStreamDegenerateTruncated: a degenerate answer that is not
// streamed is cut at the start of the repetition in each API, and each
// client reads it with the status a cut stream ends with.
func TestAPIsNonStreamDegenerateTruncated(t *testing.T) {
	full := "Let me look at the logs first. " + strings.Repeat(degenerateSentence, 60)
	type client struct {
		api, name string
		agent     agentFunc
	}
	clients := []client{{"anthropic", "anthropic-sdk-go", anthropicAgent}}
	for name, agent := range responsesAgents(t) {
		clients = append(clients, client{"responses", name, agent})
	}
	for _, c := range clients {
		t.Run(c.api+"/"+c.name, func(t *testing.T) {
			t.Parallel()
			fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{
				fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer { return fakellm.ResponsesAnswer{Text: full} }),
				fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer { return fakellm.AnthropicAnswer{Text: full} }),
			}})
			lg := startLoopguard(t, fake.URL(), nil)
			run := c.agent(t, lg.URL, agentOpts{session: "json-cut-" + c.api + "-" + c.name, maxTurns: 1})
			tr := run.Turns[0]
			if tr.Err != "" {
				t.Fatalf("client error: %s", tr.Err)
			}
			if len(tr.Content) >= len(full) || !strings.HasPrefix(full, tr.Content) || !strings.HasPrefix(tr.Content, "Let me look at the logs first. ") {
				t.Errorf("content (%d bytes) = %.120q; want a proper prefix of the %d-byte answer", len(tr.Content), tr.Content, len(full))
			}
			wantFinish := map[string]string{"responses": "completed", "anthropic": "end_turn"}[c.api]
			if tr.Finish != wantFinish {
				t.Errorf("finish = %q; want %q", tr.Finish, wantFinish)
			}
			if e := lg.waitEvents(t, 1)[0]; e.Cut != "token_degeneration" {
				t.Errorf("event = %+v; want a token_degeneration cut", e)
			}
		})
	}
}

// TestAPIsHoldToolCallsRealClients: with stream.hold_tool_calls a looping
// agent streaming on each real client of the Responses and Anthropic
// Messages APIs never gets the call the ladder would end: at constrain the
// model's next make build is held and replaced by LOOP_DETECTED in the
// API's own shape, which the client reads as a finished answer without
// calls, so the agent stops a request earlier than at terminate.
func TestAPIsHoldToolCallsRealClients(t *testing.T) {
	for _, api := range apiCases() {
		for name, agent := range api.agents(t) {
			t.Run(api.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{api.looping()}})
				lg := startLoopguard(t, fake.URL(), func(cfg *proxy.Config) { cfg.Stream.HoldToolCalls = true })
				run := agent(t, lg.URL, agentOpts{session: "hold-" + api.name + "-" + name, stream: true, maxTurns: 10})
				last := run.Turns[len(run.Turns)-1]
				if last.Err != "" || last.Action != "constrain" {
					t.Fatalf("last turn: action %q, client error %q; want constrain, no error", last.Action, last.Err)
				}
				if !strings.HasPrefix(last.Content, inject.TerminatePrefix) || last.Finish != api.finish || len(last.Calls) != 0 {
					t.Errorf("held turn: text %.120q, finish %q, calls %v; want %s..., %s, no call", last.Content, last.Finish, last.Calls, inject.TerminatePrefix, api.finish)
				}
				if n := len(fake.Requests()); n != len(run.Turns) {
					t.Errorf("upstream got %d requests for %d turns; want one per turn", n, len(run.Turns))
				}
			})
		}
	}
}
