package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sashabaranov "github.com/sashabaranov/go-openai"
	"github.com/tidwall/gjson"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/rs/zerolog"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/proxy"
)

// --- loopguard with its ChatDone hook ---

// chatDone is the part of a proxy.ChatEvent the tests look at, copied
// because the hook's event must not be retained.
type chatDone struct {
	Session    string
	Action     policy.Action
	Terminated bool
	Status     int
	FailOpen   string
	Cut        string // the cut's category, "" when the answer was not cut
	StoreFail  bool
	Start      time.Time // when the request arrived
}

// lgServer is a loopguard proxy owned by one test, with every chat request
// it reported through proxy.WithChatDone.
type lgServer struct {
	URL string
	// srv is the proxy, for reading its session record in-process.
	srv *proxy.Server

	mu     sync.Mutex
	events []chatDone
}

// startLoopguard runs a loopguard proxy in front of upstream on a free
// loopback port, with cfg edited by edit (nil: defaults). It shuts down
// when the test ends.
func startLoopguard(t *testing.T, upstream string, edit func(*proxy.Config)) *lgServer {
	t.Helper()
	cfg := proxy.DefaultConfig()
	cfg.Upstream.URL = upstream
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	lg := &lgServer{}
	srv, err := proxy.New(cfg, zerolog.Nop(), proxy.WithChatDone(lg.record))
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("proxy Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("proxy Serve: %v", err)
		}
	})
	lg.URL = "http://" + ln.Addr().String()
	lg.srv = srv
	return lg
}

func (lg *lgServer) record(ev *proxy.ChatEvent) {
	d := chatDone{Session: ev.Session, Action: ev.Decision.Action, Terminated: ev.Terminated, Status: ev.Status,
		FailOpen: ev.FailOpen, StoreFail: ev.Decision.StoreFailed, Start: ev.Start}
	if ev.Cut != nil {
		d.Cut = string(ev.Cut.Category)
	}
	lg.mu.Lock()
	lg.events = append(lg.events, d)
	lg.mu.Unlock()
}

// seen returns a copy of the events reported so far, in the order their
// requests arrived: an event is reported when its answer has ended, so a
// streamed answer's may come after the next request's.
func (lg *lgServer) seen() []chatDone {
	lg.mu.Lock()
	evs := append([]chatDone(nil), lg.events...)
	lg.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b chatDone) int { return a.Start.Compare(b.Start) })
	return evs
}

// waitEvents polls until at least n chat requests were reported (the hook
// runs after the answer ended, possibly after the client has read it) and
// returns them; it fails the test after testTimeout.
func (lg *lgServer) waitEvents(t *testing.T, n int) []chatDone {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		evs := lg.seen()
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy reported %d chat requests after %v; want %d", len(evs), testTimeout, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// --- a transport that records what a client really sends ---

// sent is one HTTP request a client made and the head of its answer.
type sent struct {
	Body   []byte
	Status int
	Header http.Header
}

// recorder is an http.RoundTripper under a client's retry loop: it sees
// every request the client makes (retries included), records its exact
// body and the answer's headers, and adds the session header.
type recorder struct {
	base    http.RoundTripper
	session string

	mu   sync.Mutex
	sent []sent
}

func newRecorder(t *testing.T, session string) *recorder {
	return &recorder{base: newTransport(t), session: session}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	// A RoundTripper must not modify the request it was given.
	out := req.Clone(req.Context())
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	if r.session != "" {
		out.Header.Set("X-Session-ID", r.session)
	}
	resp, err := r.base.RoundTrip(out)
	s := sent{Body: body}
	if resp != nil {
		s.Status, s.Header = resp.StatusCode, resp.Header.Clone()
	}
	r.mu.Lock()
	r.sent = append(r.sent, s)
	r.mu.Unlock()
	return resp, err
}

// all returns a copy of the recorded requests.
func (r *recorder) all() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.sent...)
}

// last returns the latest recorded request.
func (r *recorder) last() sent {
	s := r.all()
	if len(s) == 0 {
		return sent{}
	}
	return s[len(s)-1]
}

// --- the agents ---

// failingBuild is the tool result the looping agent gets every time.
const failingBuild = "make: *** No rule to make target 'build'.  Stop.\nexit code 2"

// makeBuild is the call the looping model keeps making.
var makeBuild = fakellm.ToolCall{Name: "bash", Arguments: `{"command":"make build"}`}

// toolCall is one call as an agent reassembled it.
type toolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Args string `json:"arguments"`
}

// histMsg is one message of an agent's history, client-neutral.
type histMsg struct {
	Role    string
	Content string
	Calls   []toolCall
	CallID  string
}

// agentTurn is one request of an agent and what came back.
type agentTurn struct {
	Body    []byte // the exact request body the client sent
	Status  int
	Action  string // X-Loopguard-Action
	Loop    string // X-Loopguard-Loop
	Session string // X-Loopguard-Session
	Content string
	Finish  string
	Calls   []toolCall
	Usage   *usage
	Err     string
	// ErrStatus and ShouldRetry describe an API error the client raised.
	ErrStatus   int
	ShouldRetry string
}

// agentRun is a whole agent run: its turns and every HTTP request the client
// made (retries included).
type agentRun struct {
	Turns    []agentTurn
	Requests int
}

// agentOpts configures one agent run.
type agentOpts struct {
	session  string
	stream   bool
	retries  int
	maxTurns int
	// result answers a tool call; nil means failingBuild.
	result func(c toolCall) string
	// start is the history's first messages; nil means loopStart.
	start []histMsg
}

// loopStart is the looping agent's task.
var loopStart = []histMsg{
	{Role: "system", Content: "You are a coding agent. Use the bash tool."},
	{Role: "user", Content: "Build the project and fix any error."},
}

// agentFunc runs an agent against base (no /v1).
type agentFunc func(t *testing.T, base string, o agentOpts) agentRun

// runAgent is the agent loop shared by the Go clients: it asks step for
// each turn, executes the calls and appends them and their results to the
// history, until the model answers without calls or the client fails.
func runAgent(o agentOpts, step func(hist []histMsg) agentTurn) []agentTurn {
	hist := append([]histMsg(nil), o.start...)
	if hist == nil {
		hist = append(hist, loopStart...)
	}
	result := o.result
	if result == nil {
		result = func(toolCall) string { return failingBuild }
	}
	var turns []agentTurn
	for i := 0; i < o.maxTurns; i++ {
		tr := step(hist)
		turns = append(turns, tr)
		if tr.Err != "" || len(tr.Calls) == 0 {
			break
		}
		hist = append(hist, histMsg{Role: "assistant", Content: tr.Content, Calls: tr.Calls})
		for _, c := range tr.Calls {
			hist = append(hist, histMsg{Role: "tool", Content: result(c), CallID: c.ID})
		}
	}
	return turns
}

// agentTools are the tools the agents declare.
var agentTools = []string{"bash", "read_file", "grep", "edit_file"}

func ladderAgents(t *testing.T) map[string]agentFunc {
	as := map[string]agentFunc{"go-openai": goOpenAIAgent, "openai-go": openaiGoAgent}
	if node := nodeOrSkip(t); node != "" {
		as["node-openai"] = func(t *testing.T, base string, o agentOpts) agentRun { return nodeAgent(t, node, base, o) }
	}
	return as
}

func headerTurn(s sent) agentTurn {
	return agentTurn{Body: s.Body, Status: s.Status, Action: s.Header.Get(proxy.HeaderAction),
		Loop: s.Header.Get(proxy.HeaderLoop), Session: s.Header.Get(proxy.HeaderSession)}
}

func goOpenAIAgent(t *testing.T, base string, o agentOpts) agentRun {
	t.Helper()
	rec := newRecorder(t, o.session)
	cfg := sashabaranov.DefaultConfig("sk-e2e")
	cfg.BaseURL = base + "/v1"
	cfg.HTTPClient = &http.Client{Transport: rec}
	client := sashabaranov.NewClientWithConfig(cfg)
	var tools []sashabaranov.Tool
	for _, n := range agentTools {
		tools = append(tools, sashabaranov.Tool{Type: "function", Function: &sashabaranov.FunctionDefinition{
			Name: n, Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}})
	}
	step := func(hist []histMsg) agentTurn {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		req := sashabaranov.ChatCompletionRequest{Model: "fake-model", Tools: tools}
		for _, m := range hist {
			cm := sashabaranov.ChatCompletionMessage{Role: m.Role, Content: m.Content, ToolCallID: m.CallID}
			for _, c := range m.Calls {
				cm.ToolCalls = append(cm.ToolCalls, sashabaranov.ToolCall{ID: c.ID, Type: "function",
					Function: sashabaranov.FunctionCall{Name: c.Name, Arguments: c.Args}})
			}
			req.Messages = append(req.Messages, cm)
		}
		var tr agentTurn
		if !o.stream {
			resp, err := client.CreateChatCompletion(ctx, req)
			tr = headerTurn(rec.last())
			if err != nil {
				tr.Err = err.Error()
				var apiErr *sashabaranov.APIError
				if errors.As(err, &apiErr) {
					tr.ErrStatus = apiErr.HTTPStatusCode
				}
				tr.ShouldRetry = rec.last().Header.Get("X-Should-Retry")
				return tr
			}
			m := resp.Choices[0].Message
			tr.Content, tr.Finish = m.Content, string(resp.Choices[0].FinishReason)
			for _, c := range m.ToolCalls {
				tr.Calls = append(tr.Calls, toolCall{c.ID, c.Function.Name, c.Function.Arguments})
			}
			tr.Usage = &usage{int64(resp.Usage.PromptTokens), int64(resp.Usage.CompletionTokens), int64(resp.Usage.TotalTokens)}
			return tr
		}
		req.Stream = true
		req.StreamOptions = &sashabaranov.StreamOptions{IncludeUsage: true}
		st, err := client.CreateChatCompletionStream(ctx, req)
		tr = headerTurn(rec.last())
		if err != nil {
			tr.Err = err.Error()
			var reqErr *sashabaranov.RequestError
			var apiErr *sashabaranov.APIError
			switch {
			case errors.As(err, &apiErr):
				tr.ErrStatus = apiErr.HTTPStatusCode
			case errors.As(err, &reqErr):
				tr.ErrStatus = reqErr.HTTPStatusCode
			}
			tr.ShouldRetry = rec.last().Header.Get("X-Should-Retry")
			return tr
		}
		defer st.Close()
		acc := map[int]*toolCall{}
		var order []int
		for {
			chunk, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				tr.Err = err.Error()
				break
			}
			if chunk.Usage != nil {
				tr.Usage = &usage{int64(chunk.Usage.PromptTokens), int64(chunk.Usage.CompletionTokens), int64(chunk.Usage.TotalTokens)}
			}
			for _, ch := range chunk.Choices {
				tr.Content += ch.Delta.Content
				for _, tc := range ch.Delta.ToolCalls {
					i := 0
					if tc.Index != nil {
						i = *tc.Index
					}
					c := acc[i]
					if c == nil {
						c = &toolCall{}
						acc[i] = c
						order = append(order, i)
					}
					if tc.ID != "" {
						c.ID = tc.ID
					}
					if tc.Function.Name != "" {
						c.Name = tc.Function.Name
					}
					c.Args += tc.Function.Arguments
				}
				if ch.FinishReason != "" {
					tr.Finish = string(ch.FinishReason)
				}
			}
		}
		for _, i := range order {
			tr.Calls = append(tr.Calls, *acc[i])
		}
		return tr
	}
	turns := runAgent(o, step)
	return agentRun{Turns: turns, Requests: len(rec.all())}
}

func openaiGoAgent(t *testing.T, base string, o agentOpts) agentRun {
	t.Helper()
	rec := newRecorder(t, o.session)
	client := oai.NewClient(
		option.WithBaseURL(base+"/v1/"),
		option.WithAPIKey("sk-e2e"),
		option.WithMaxRetries(o.retries),
		option.WithHTTPClient(&http.Client{Transport: rec}),
	)
	var tools []oai.ChatCompletionToolUnionParam
	for _, n := range agentTools {
		tools = append(tools, oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: n, Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{}}}))
	}
	step := func(hist []histMsg) agentTurn {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		params := oai.ChatCompletionNewParams{Model: "fake-model", Tools: tools}
		for _, m := range hist {
			switch m.Role {
			case "system":
				params.Messages = append(params.Messages, oai.SystemMessage(m.Content))
			case "user":
				params.Messages = append(params.Messages, oai.UserMessage(m.Content))
			case "tool":
				params.Messages = append(params.Messages, oai.ToolMessage(m.Content, m.CallID))
			case "assistant":
				am := oai.ChatCompletionAssistantMessageParam{}
				if m.Content != "" {
					am.Content.OfString = oai.String(m.Content)
				}
				for _, c := range m.Calls {
					am.ToolCalls = append(am.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
						OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{ID: c.ID,
							Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Args}}})
				}
				params.Messages = append(params.Messages, oai.ChatCompletionMessageParamUnion{OfAssistant: &am})
			}
		}
		// The headers come through the SDK's own option here; the recorder
		// only supplies the exact body.
		var httpResp *http.Response
		var tr agentTurn
		fill := func(err error) {
			tr = agentTurn{Body: rec.last().Body}
			if httpResp != nil {
				tr.Status = httpResp.StatusCode
				tr.Action, tr.Loop = httpResp.Header.Get(proxy.HeaderAction), httpResp.Header.Get(proxy.HeaderLoop)
				tr.Session = httpResp.Header.Get(proxy.HeaderSession)
			}
			if err != nil {
				tr.Err = err.Error()
				var apiErr *oai.Error
				if errors.As(err, &apiErr) {
					tr.ErrStatus = apiErr.StatusCode
					if apiErr.Response != nil {
						tr.ShouldRetry = apiErr.Response.Header.Get("X-Should-Retry")
						tr.Action = apiErr.Response.Header.Get(proxy.HeaderAction)
					}
				}
			}
		}
		if !o.stream {
			resp, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&httpResp))
			fill(err)
			if err != nil {
				return tr
			}
			m := resp.Choices[0].Message
			tr.Content, tr.Finish = m.Content, resp.Choices[0].FinishReason
			for _, c := range m.ToolCalls {
				tr.Calls = append(tr.Calls, toolCall{c.ID, c.Function.Name, c.Function.Arguments})
			}
			tr.Usage = &usage{resp.Usage.PromptTokens, resp.Usage.CompletionTokens, resp.Usage.TotalTokens}
			return tr
		}
		params.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
		st := client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&httpResp))
		defer st.Close()
		var acc oai.ChatCompletionAccumulator
		sawUsage := false
		for st.Next() {
			chunk := st.Current()
			sawUsage = sawUsage || chunk.JSON.Usage.Valid()
			acc.AddChunk(chunk)
		}
		fill(st.Err())
		if tr.Err != "" {
			return tr
		}
		if len(acc.Choices) == 0 {
			tr.Err = "stream ended without choices"
			return tr
		}
		m := acc.Choices[0].Message
		tr.Content, tr.Finish = m.Content, acc.Choices[0].FinishReason
		for _, c := range m.ToolCalls {
			tr.Calls = append(tr.Calls, toolCall{c.ID, c.Function.Name, c.Function.Arguments})
		}
		// The accumulator copies the usage chunk's numbers but not its JSON
		// metadata, so presence is judged on the chunks.
		if sawUsage {
			tr.Usage = &usage{acc.Usage.PromptTokens, acc.Usage.CompletionTokens, acc.Usage.TotalTokens}
		}
		return tr
	}
	turns := runAgent(o, step)
	return agentRun{Turns: turns, Requests: len(rec.all())}
}

// nodeLadder is ladder.mjs's summary.
type nodeLadder struct {
	Turns []struct {
		Body    string     `json:"body"`
		Action  *string    `json:"action"`
		Loop    *string    `json:"loop"`
		Session *string    `json:"session"`
		Status  int        `json:"status"`
		Content string     `json:"content"`
		Finish  *string    `json:"finish_reason"`
		Calls   []toolCall `json:"tool_calls"`
		Usage   *struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
			Total      int64 `json:"total_tokens"`
		} `json:"usage"`
		Error *struct {
			Name        string  `json:"name"`
			APIError    bool    `json:"api_error"`
			Status      int     `json:"status"`
			ShouldRetry *string `json:"should_retry"`
			Action      *string `json:"action"`
			Message     string  `json:"message"`
		} `json:"error"`
	} `json:"turns"`
	Fetches int `json:"fetches"`
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nodeAgent runs node/ladder.mjs: the looping agent with the official npm
// client (it has no other tool results, so o.result and o.start must be nil).
func nodeAgent(t *testing.T, node, base string, o agentOpts) agentRun {
	t.Helper()
	if o.result != nil || o.start != nil {
		t.Fatal("ladder.mjs plays only the looping agent")
	}
	mode := "nonstream"
	if o.stream {
		mode = "stream"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "ladder.mjs", base+"/v1", mode, o.session, fmt.Sprint(o.retries), fmt.Sprint(o.maxTurns))
	cmd.Dir = nodeDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node ladder.mjs: %v\nstderr: %s", err, stderr.String())
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
			tr.Err, tr.ErrStatus, tr.ShouldRetry = e.Name+": "+e.Message, e.Status, deref(e.ShouldRetry)
			tr.Action = deref(e.Action)
			if !e.APIError {
				tr.Err += " (not an APIError)"
			}
		}
		run.Turns = append(run.Turns, tr)
	}
	return run
}

// --- byte comparisons ---

// insertion checks that upstream is client with exactly one run of bytes
// inserted, and returns that run.
func insertion(client, upstream []byte) (inserted []byte, ok bool) {
	p := 0
	for p < len(client) && p < len(upstream) && client[p] == upstream[p] {
		p++
	}
	s := 0
	for s < len(client)-p && s < len(upstream)-p && client[len(client)-1-s] == upstream[len(upstream)-1-s] {
		s++
	}
	if p+s != len(client) {
		return nil, false
	}
	return upstream[p : len(upstream)-s], true
}

// firstDiff shows where two bodies first differ, with a little context,
// so that failures stay readable with long histories.
func firstDiff(client, upstream []byte) string {
	p := 0
	for p < len(client) && p < len(upstream) && client[p] == upstream[p] {
		p++
	}
	from := max(0, p-60)
	return fmt.Sprintf("at byte %d (lengths %d, %d):\nclient   …%q\nupstream …%q", p, len(client), len(upstream),
		client[from:min(len(client), p+200)], upstream[from:min(len(upstream), p+200)])
}

// placedAt reports whether body's messages carry text at placement p,
// where client had no such text.
func placedAt(body []byte, p inject.Placement, text string) bool {
	msgs := gjson.GetBytes(body, "messages").Array()
	if len(msgs) == 0 {
		return false
	}
	switch p {
	case inject.System:
		m := msgs[0]
		return m.Get("role").String() == "system" && strings.Contains(m.Get("content").String(), text)
	case inject.User:
		m := msgs[len(msgs)-1]
		return m.Get("role").String() == "user" && strings.Contains(m.Get("content").String(), text)
	default: // auto and tool: after a tool result, appended to it
		m := msgs[len(msgs)-1]
		return m.Get("role").String() == "tool" && strings.Contains(m.Get("content").String(), text)
	}
}

// pairing checks that every assistant tool call of body has exactly one tool
// result after it and every tool result answers an earlier call.
func pairing(body []byte) error {
	calls := map[string]int{}
	results := map[string]int{}
	for i, m := range gjson.GetBytes(body, "messages").Array() {
		switch m.Get("role").String() {
		case "assistant":
			for _, c := range m.Get("tool_calls").Array() {
				calls[c.Get("id").String()]++
			}
		case "tool":
			id := m.Get("tool_call_id").String()
			if calls[id] == 0 {
				return fmt.Errorf("message %d answers %q, which no earlier assistant turn calls", i, id)
			}
			results[id]++
		}
	}
	for id, n := range calls {
		if n != 1 || results[id] != 1 {
			return fmt.Errorf("call %q made %d times with %d results", id, n, results[id])
		}
	}
	return nil
}

// checkLadder asserts the looping agent's run: none until warn, then
// constrain, then terminate, and what the upstream got at each step.
func checkLadder(t *testing.T, run agentRun, ups []fakellm.Request, session string, placement inject.Placement, stream bool) {
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
		t.Fatalf("actions = %q; want none at least once, then warn, constrain, terminate and the end", actions)
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
		switch tr.Action {
		case "none":
			if !bytes.Equal(up.Body, tr.Body) {
				t.Errorf("turn %d (none): upstream body differs from the client's: %s", i, firstDiff(tr.Body, up.Body))
			}
		case "warn":
			ins, ok := insertion(tr.Body, up.Body)
			if !ok {
				t.Errorf("turn %d (warn): upstream body is not the client's plus one insertion: %s", i, firstDiff(tr.Body, up.Body))
			} else if !bytes.Contains(ins, []byte(inject.Marker)) {
				t.Errorf("turn %d (warn): inserted %q; want the %s notice", i, ins, inject.Marker)
			}
			if !placedAt(up.Body, placement, inject.Marker) {
				t.Errorf("turn %d (warn): notice not at placement %s: %s", i, placement, up.Body)
			}
		case "constrain":
			n, m := gjson.GetBytes(tr.Body, "messages.#").Int(), gjson.GetBytes(up.Body, "messages.#").Int()
			if m >= n {
				t.Errorf("turn %d (constrain): upstream got %d messages, client sent %d; want the loop collapsed", i, m, n)
			}
			if err := pairing(up.Body); err != nil {
				t.Errorf("turn %d (constrain): collapsed history: %v\n%s", i, err, up.Body)
			}
			if !placedAt(up.Body, placement, inject.RecoveryTag) {
				t.Errorf("turn %d (constrain): no %s block at placement %s: %s", i, inject.RecoveryTag, placement, up.Body)
			}
			// Everything before the looping span is kept byte for byte.
			first := gjson.GetBytes(tr.Body, "messages.0").Raw
			if !bytes.Contains(up.Body, []byte(first)) && placement != inject.System {
				t.Errorf("turn %d (constrain): the first message changed", i)
			}
		}
	}
	last := turns[len(turns)-1]
	if last.Err != "" || last.Status != http.StatusOK {
		t.Fatalf("terminate: status %d, client error %q; want a normal completion", last.Status, last.Err)
	}
	if !strings.HasPrefix(last.Content, inject.TerminatePrefix) || last.Finish != "stop" || len(last.Calls) != 0 {
		t.Errorf("terminate: content %q, finish %q, calls %v; want %s..., stop, none", last.Content, last.Finish, last.Calls, inject.TerminatePrefix)
	}
	if stream && (last.Usage == nil || last.Usage.Total != last.Usage.Prompt+last.Usage.Completion) {
		t.Errorf("terminate: usage = %+v; want one, as the request asked", last.Usage)
	}
}

// loopingModel always calls bash make build.
func loopingModel(d fakellm.Dialect) fakellm.Script {
	return fakellm.Script{Loop: true, Responses: []fakellm.Response{{Dialect: d, ToolCalls: []fakellm.ToolCall{makeBuild}}}}
}

// TestLadderRealClients: a looping agent on each real client, streaming or
// not, with each placement, climbs none.. -> warn -> constrain -> terminate,
// and the upstream sees the client's bytes plus loopguard's text only.
func TestLadderRealClients(t *testing.T) {
	agents := ladderAgents(t)
	for _, placement := range []inject.Placement{inject.Auto, inject.User, inject.System} {
		for name, agent := range agents {
			for _, stream := range []bool{false, true} {
				mode := map[bool]string{true: "stream", false: "json"}[stream]
				t.Run(string(placement)+"/"+name+"/"+mode, func(t *testing.T) {
					t.Parallel()
					fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
					lg := startLoopguard(t, fake.URL(), func(c *proxy.Config) { c.Inject.Placement = placement })
					session := "ladder-" + name + "-" + mode
					run := agent(t, lg.URL, agentOpts{session: session, stream: stream, maxTurns: 10})
					checkLadder(t, run, fake.Requests(), session, placement, stream)
					if evs := lg.waitEvents(t, run.Requests); len(evs) != run.Requests {
						t.Errorf("proxy saw %d chat requests; the client made %d", len(evs), run.Requests)
					}
				})
			}
		}
	}
}

// TestLadderTerminateAsError: with terminate_as = "error" the last rung is
// a 422 that SDKs with retries enabled raise at once, without retrying.
func TestLadderTerminateAsError(t *testing.T) {
	for name, agent := range ladderAgents(t) {
		for _, stream := range []bool{false, true} {
			mode := map[bool]string{true: "stream", false: "json"}[stream]
			t.Run(name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
				lg := startLoopguard(t, fake.URL(), func(c *proxy.Config) { c.Inject.TerminateAs = inject.AsError })
				run := agent(t, lg.URL, agentOpts{session: "err-" + name + "-" + mode, stream: stream, retries: 2, maxTurns: 10})
				turns := run.Turns
				last := turns[len(turns)-1]
				if last.Err == "" || last.ErrStatus != http.StatusUnprocessableEntity {
					t.Fatalf("last turn: error %q status %d; want the SDK to raise a 422 API error (turns %d)", last.Err, last.ErrStatus, len(turns))
				}
				if strings.Contains(last.Err, "not an APIError") {
					t.Errorf("node: %s", last.Err)
				}
				if last.ShouldRetry != "false" {
					t.Errorf("x-should-retry = %q; want false", last.ShouldRetry)
				}
				if name != "go-openai" && last.Action != "terminate" {
					// go-openai's errors keep no headers; the others show loopguard's.
					t.Errorf("terminate error: %s = %q", proxy.HeaderAction, last.Action)
				}
				evs := lg.waitEvents(t, len(turns))
				if run.Requests != len(turns) || len(evs) != len(turns) {
					t.Errorf("client made %d requests, proxy saw %d, for %d turns; want no retry", run.Requests, len(evs), len(turns))
				}
				// A stream's event is reported after its answer ended, possibly
				// after the next request's: find the terminated one by content.
				var term []chatDone
				for _, e := range evs {
					if e.Terminated {
						term = append(term, e)
					}
				}
				if len(term) != 1 || term[0].Status != http.StatusUnprocessableEntity || term[0].Action != policy.Terminate {
					t.Errorf("terminated chat events = %+v; want one, with 422", term)
				}
				if len(fake.Requests()) != len(turns)-1 {
					t.Errorf("upstream got %d requests; want %d", len(fake.Requests()), len(turns)-1)
				}
			})
		}
	}
}

// loopingBody is the looping agent's raw request after n failed builds.
func loopingBody(n int, stream bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":"fake-model","stream":%v,"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Build it."}`, stream)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"bash","arguments":"{\"command\":\"make build\"}"}}]}`, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":%q}`, i, failingBuild)
	}
	b.WriteString(`]}`)
	return b.String()
}

// postRaw sends body to base's chat route with the given extra headers.
func postRaw(t *testing.T, base, body string, hdr map[string]string) rawExchange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: newTransport(t)}).Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return rawExchange{resp.StatusCode, resp.Header, b}
}

// TestShadowModeChangesOnlyHeaders: in shadow mode a looping agent's
// requests and the answers go through byte for byte, and only the headers
// say what enforce would have done.
func TestShadowModeChangesOnlyHeaders(t *testing.T) {
	for _, d := range []fakellm.Dialect{fakellm.OpenAI, fakellm.VLLM} {
		for _, stream := range []bool{false, true} {
			mode := map[bool]string{true: "stream", false: "json"}[stream]
			t.Run(d.String()+"/"+mode, func(t *testing.T) {
				t.Parallel()
				fake := fakellm.Start(t, loopingModel(d))
				lg := startLoopguard(t, fake.URL(), func(c *proxy.Config) { c.Policy.Mode = policy.ModeShadow })
				for n := 0; n <= 8; n++ {
					body := loopingBody(n, stream)
					got := postRaw(t, lg.URL, body, map[string]string{"X-Session-ID": "shadow-" + mode})
					x := lastDone(t, fake, n+1)
					if string(x.Request.Body) != body {
						t.Errorf("%d calls: upstream body changed in shadow mode:\n%s", n, x.Request.Body)
					}
					if !bytes.Equal(got.body, x.Body) {
						t.Errorf("%d calls: answer changed in shadow mode:\ngot  %q\nwant %q", n, got.body, x.Body)
					}
					a := got.header.Get(proxy.HeaderAction)
					if n >= 3 && (a != "shadow" || got.header.Get(proxy.HeaderLoop) == "") {
						t.Errorf("%d calls: %s = %q, %s = %q; want shadow and the category", n, proxy.HeaderAction, a,
							proxy.HeaderLoop, got.header.Get(proxy.HeaderLoop))
					}
					if n < 3 && a != "none" && a != "shadow" {
						t.Errorf("%d calls: %s = %q", n, proxy.HeaderAction, a)
					}
				}
			})
		}
	}
}

// TestClientModeOverride: X-Loopguard-Mode lowers one request's mode only
// where the config allows client overrides.
func TestClientModeOverride(t *testing.T) {
	tests := []struct {
		name       string
		allow      bool
		header     string
		wantAction string
		wantSame   bool // the upstream body equals the client's
	}{
		{"off ignored", false, "off", "warn", false},
		{"shadow ignored", false, "shadow", "warn", false},
		{"off allowed", true, "off", "none", true},
		{"shadow allowed", true, "shadow", "shadow", true},
		{"raise ignored", true, "enforce", "warn", false},
		{"garbage ignored", true, "disable", "warn", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := fakellm.Start(t, loopingModel(fakellm.OpenAI))
			lg := startLoopguard(t, fake.URL(), func(c *proxy.Config) { c.Policy.AllowClientOverride = tt.allow })
			body := loopingBody(3, false)
			got := postRaw(t, lg.URL, body, map[string]string{"X-Session-ID": "override", "X-Loopguard-Mode": tt.header})
			x := lastDone(t, fake, 1)
			if a := got.header.Get(proxy.HeaderAction); a != tt.wantAction {
				t.Errorf("%s = %q; want %q", proxy.HeaderAction, a, tt.wantAction)
			}
			if same := string(x.Request.Body) == body; same != tt.wantSame {
				t.Errorf("upstream body unchanged = %v; want %v:\n%s", same, tt.wantSame, x.Request.Body)
			}
			if x.Request.Header.Get("X-Loopguard-Mode") != tt.header {
				t.Errorf("upstream got X-Loopguard-Mode %q; want it forwarded like any header", x.Request.Header.Get("X-Loopguard-Mode"))
			}
			// The override is for one request: the next one is judged again.
			if tt.allow && tt.wantSame {
				got := postRaw(t, lg.URL, loopingBody(3, false), map[string]string{"X-Session-ID": "override"})
				if a := got.header.Get(proxy.HeaderAction); a != "warn" {
					t.Errorf("next request without the header: %s = %q; want warn", proxy.HeaderAction, a)
				}
			}
		})
	}
}

// healthyTurns is the length of the healthy agent's run.
const healthyTurns = 50

// healthyCall is the healthy model's call number k: it reads different
// files, searches, edits, re-runs the tests after each edit and looks at
// the diff, in a rotation.
func healthyCall(k int) fakellm.ToolCall {
	switch k % 5 {
	case 0:
		return fakellm.ToolCall{Name: "read_file", Arguments: fmt.Sprintf(`{"path":"pkg/mod%d/handler.go"}`, k)}
	case 1:
		return fakellm.ToolCall{Name: "grep", Arguments: fmt.Sprintf(`{"pattern":"func Handle%d\\b","path":"pkg"}`, k)}
	case 2:
		return fakellm.ToolCall{Name: "edit_file", Arguments: fmt.Sprintf(`{"path":"pkg/mod%d/handler.go","old":"return nil","new":"return err%d"}`, k-2, k)}
	case 3:
		return fakellm.ToolCall{Name: "bash", Arguments: `{"command":"go test ./pkg/..."}`}
	default:
		return fakellm.ToolCall{Name: "bash", Arguments: `{"command":"git diff --stat"}`}
	}
}

// healthyEnv returns the environment's answers to the healthy agent's calls:
// the test results change after every edit, and the last runs pass.
func healthyEnv() func(c toolCall) string {
	healthyRuns := 0
	return func(c toolCall) string { return healthyResult(c, &healthyRuns) }
}

func healthyResult(c toolCall, healthyRuns *int) string {
	var a struct{ Path, Pattern, Command, Old, New string }
	_ = json.Unmarshal([]byte(c.Args), &a)
	switch {
	case c.Name == "read_file":
		return "package handler\n\n// " + a.Path + "\nfunc Handle() error {\n\treturn nil\n}\n"
	case c.Name == "grep":
		return "pkg/handler.go:12: " + strings.TrimSuffix(a.Pattern, `\b`) + "(w http.ResponseWriter) error {"
	case c.Name == "edit_file":
		return "Edited " + a.Path + ": replaced 1 occurrence with " + a.New
	case a.Command == "go test ./pkg/...":
		// Each edit fixes the test that failed first, so each run fails on
		// a different test with a different message, and the last pass.
		*healthyRuns++
		var b strings.Builder
		for _, name := range healthyTests[min(*healthyRuns, len(healthyTests)):] {
			fmt.Fprintf(&b, "--- FAIL: Test%s (0.00s)\n    %s_test.go:42: %s returned nil; want an error\n", name, strings.ToLower(name), name)
		}
		if b.Len() == 0 {
			return "ok  \tpkg/handler\t0.41s"
		}
		return b.String() + "FAIL\tpkg/handler\t0.12s"
	default:
		return fmt.Sprintf(" pkg/mod%d/handler.go | %d +-\n 1 file changed", *healthyRuns, *healthyRuns+1)
	}
}

// healthyTests are the failing tests of the healthy agent's project.
var healthyTests = []string{"ParseConfig", "RenderPage", "ServeFiles", "OpenStore", "CloseStore", "RotateLogs", "SignToken", "VerifyToken"}

// TestHealthyAgentUntouched: a 50-turn agent that makes progress (different
// files, tests re-run after different edits with changing results) is never
// touched: every upstream body is the client's, byte for byte.
func TestHealthyAgentUntouched(t *testing.T) {
	tests := []struct {
		name   string
		agent  agentFunc
		stream bool
	}{
		{"go-openai/json", goOpenAIAgent, false},
		{"openai-go/stream", openaiGoAgent, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			healthyAgentRun(t, tt.agent, tt.stream)
		})
	}
}

func healthyAgentRun(t *testing.T, agent agentFunc, stream bool) {
	fake := fakellm.Start(t, fakellm.Script{Rules: []fakellm.Rule{{Respond: func(r *fakellm.Request) fakellm.Response {
		k := 0
		gjson.GetBytes(r.Body, "messages").ForEach(func(_, m gjson.Result) bool {
			if m.Get("role").String() == "tool" {
				k++
			}
			return true
		})
		if k >= healthyTurns {
			return fakellm.Response{Content: "All tests pass now; the handlers return their errors."}
		}
		return fakellm.Response{Content: fmt.Sprintf("Step %d.", k), ToolCalls: []fakellm.ToolCall{healthyCall(k)}}
	}}}})
	lg := startLoopguard(t, fake.URL(), nil)
	start := []histMsg{
		{Role: "system", Content: "You are a coding agent."},
		{Role: "user", Content: "Make every handler return its error and get the tests green."},
	}
	run := agent(t, lg.URL, agentOpts{session: "healthy", stream: stream, maxTurns: healthyTurns + 5, result: healthyEnv(), start: start})
	if len(run.Turns) != healthyTurns+1 {
		last := run.Turns[len(run.Turns)-1]
		t.Errorf("agent ran %d turns; want %d (last: action %q, loop %q, error %q, content %.200q)",
			len(run.Turns), healthyTurns+1, last.Action, last.Loop, last.Err, last.Content)
	}
	ups := fake.Requests()
	if len(ups) != len(run.Turns) {
		t.Errorf("upstream got %d requests for %d turns", len(ups), len(run.Turns))
	}
	for i, tr := range run.Turns {
		if tr.Err != "" || tr.Action != "none" || tr.Loop != "" || (i < healthyTurns && len(tr.Calls) != 1) {
			t.Errorf("turn %d: error %q, %s = %q, %s = %q; want none", i, tr.Err, proxy.HeaderAction, tr.Action, proxy.HeaderLoop, tr.Loop)
		}
		if i < len(ups) && !bytes.Equal(ups[i].Body, tr.Body) {
			t.Errorf("turn %d: upstream body differs from the client's: %s", i, firstDiff(tr.Body, ups[i].Body))
		}
	}
	for i, e := range lg.waitEvents(t, len(run.Turns)) {
		if e.Action != policy.None || e.FailOpen != "" || e.Cut != "" {
			t.Errorf("chat event %d = %+v; want nothing done", i, e)
		}
	}
}
