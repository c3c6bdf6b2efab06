package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/policy"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// budgetAPI is one wire API as a budget test drives it: a healthy
// request, the upstream's answer with a known usage, and where
// loopguard's own answer keeps its text.
type budgetAPI struct {
	name, path string
	body       func(stream bool) string
	// perAnswer is the tokens each scripted answer reports.
	perAnswer int64
	// text reads the text of a non-streamed answer.
	text func(answer string) string
	// streamEnd is what ends a streamed answer in the API's shape.
	streamEnd string
	// streamPath is where a streamed request goes when the path says
	// whether it streams (Gemini's), else "".
	streamPath string
}

const budgetUser = `"Summarise the repository."`

var budgetAPIs = []budgetAPI{
	{"chat", "/v1/chat/completions",
		func(s bool) string {
			return fmt.Sprintf(`{"model":"gpt-4.1","stream":%v,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%s}]}`, s, budgetUser)
		},
		150, func(a string) string { return gjson.Get(a, "choices.0.message.content").String() }, "data: [DONE]", ""},
	{"responses", "/v1/responses",
		func(s bool) string { return fmt.Sprintf(`{"model":"gpt-4.1","stream":%v,"input":%s}`, s, budgetUser) },
		150, func(a string) string { return gjson.Get(a, "output.0.content.0.text").String() }, "response.completed", ""},
	{"anthropic", "/v1/messages",
		func(s bool) string {
			return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":%v,"messages":[{"role":"user","content":%s}]}`, s, budgetUser)
		},
		150, func(a string) string { return gjson.Get(a, "content.0.text").String() }, "message_stop", ""},
	{"ollama", "/api/chat",
		func(s bool) string {
			return fmt.Sprintf(`{"model":"qwen3","stream":%v,"messages":[{"role":"user","content":%s}]}`, s, budgetUser)
		},
		// prompt_eval_count 10, eval_count a quarter of the text's bytes.
		10 + int64((len(budgetText)+3)/4), func(a string) string { return gjson.Get(a, "message.content").String() }, `"done":true`, ""},
	geminiBudgetAPI("gemini", "/v1beta/models/gemini-2.5-pro:", "?alt=sse", false),
	geminiBudgetAPI("gemini/array", "/v1beta/models/gemini-2.5-pro:", "", false),
	geminiBudgetAPI("code-assist", "/v1internal:", "?alt=sse", true),
	geminiBudgetAPI("code-assist/array", "/v1internal:", "", true),
}

// geminiBudgetAPI is Gemini's API or Code Assist's at prefix, its streams
// SSE events with query "?alt=sse", else one JSON array. fakellm reports a
// quarter of the request's bytes as promptTokenCount, a quarter of the
// text's as candidatesTokenCount and of the thought's as
// thoughtsTokenCount.
func geminiBudgetAPI(name, prefix, query string, wrapped bool) budgetAPI {
	body := `{"contents":[{"role":"user","parts":[{"text":` + budgetUser + `}]}]}`
	textPath := "candidates.0.content.parts.0.text"
	if wrapped {
		body = `{"model":"gemini-2.5-pro","project":"proj-1","user_prompt_id":"p1","request":` + body + `}`
		textPath = "response." + textPath
	}
	return budgetAPI{name: name, path: prefix + "generateContent", streamPath: prefix + "streamGenerateContent" + query,
		body:      func(bool) string { return body },
		perAnswer: int64(len(body)/4 + (len(budgetText)+3)/4 + (len(budgetThought)+3)/4),
		text:      func(a string) string { return gjson.Get(a, textPath).String() },
		streamEnd: `"finishReason":"STOP"`}
}

// pathOf is where api's request goes, streamed or not.
func (api budgetAPI) pathOf(stream bool) string {
	if stream && api.streamPath != "" {
		return api.streamPath
	}
	return api.path
}

// budgetText is every scripted answer's text; Gemini's answers think
// budgetThought first.
var budgetText = strings.Repeat("The repository holds a proxy. ", 4)

const budgetThought = "Reading the tree before summarising it."

// budgetUpstream answers every API with budgetText and a usage of 100
// prompt and 50 completion tokens (Ollama: its own counts).
func budgetUpstream(t *testing.T) *fakellm.Server {
	usage := fakellm.Usage{PromptTokens: 100, CompletionTokens: 50}
	return fakellm.Start(t, fakellm.Script{Loop: true,
		Rules: []fakellm.Rule{
			fakellm.ResponsesRule(func(*fakellm.Request) fakellm.ResponsesAnswer {
				return fakellm.ResponsesAnswer{Text: budgetText, Usage: usage}
			}),
			fakellm.AnthropicRule(func(*fakellm.Request) fakellm.AnthropicAnswer {
				return fakellm.AnthropicAnswer{Text: budgetText, Usage: usage}
			}),
			fakellm.OllamaRule(func(*fakellm.Request) fakellm.OllamaAnswer { return fakellm.OllamaAnswer{Text: budgetText} }),
			fakellm.GeminiRule(func(*fakellm.Request) fakellm.GeminiAnswer {
				return fakellm.GeminiAnswer{Thought: budgetThought, Text: budgetText}
			}),
		},
		Responses: []fakellm.Response{{Content: budgetText, Usage: usage}},
	})
}

func budgetRequest(t *testing.T, base, path, session, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	resp, err := newClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestBudgetTokensEveryAPI: a session's token budget, fed by the usage each
// API's answers report (streamed or not), warns the request after 80 % and
// ends the session with BUDGET_EXCEEDED in the API's own shape, without
// calling the upstream; another session beside it is untouched.
func TestBudgetTokensEveryAPI(t *testing.T) {
	for _, api := range budgetAPIs {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", api.name, stream), func(t *testing.T) {
				up := budgetUpstream(t)
				// Two answers and a half: the third request is past 80 %, the
				// fourth past the budget.
				limit := 2*api.perAnswer + api.perAnswer/2
				_, base := startProxy(t, func(c *Config) {
					c.Upstream.URL = up.URL()
					c.Policy.SessionMaxTokens = limit
				})
				body := api.body(stream)
				for i, want := range []string{"none", "none", "warn", "terminate"} {
					before := len(up.Requests())
					resp, answer := budgetRequest(t, base, api.pathOf(stream), "spent", body)
					if a := resp.Header.Get(HeaderAction); a != want {
						t.Fatalf("request %d: action %q; want %q (%s)", i+1, a, want, answer)
					}
					reqs := up.Requests()
					switch want {
					case "none":
						if len(reqs) != before+1 || string(reqs[len(reqs)-1].Body) != body {
							t.Fatalf("request %d: the upstream did not get the body unchanged", i+1)
						}
					case "warn":
						sent := string(reqs[len(reqs)-1].Body)
						if !strings.Contains(sent, "Session budget: "+fmt.Sprint(2*api.perAnswer)+" of "+fmt.Sprint(limit)+" tokens used") {
							t.Errorf("warned request lacks the budget warning: %s", sent)
						}
						if h := resp.Header.Get(HeaderBudget); h != fmt.Sprintf("tokens %d/%d", 2*api.perAnswer, limit) {
							t.Errorf("%s = %q", HeaderBudget, h)
						}
					case "terminate":
						if len(reqs) != before {
							t.Fatalf("BUDGET_EXCEEDED called the upstream")
						}
						if resp.StatusCode != http.StatusOK {
							t.Errorf("status %d", resp.StatusCode)
						}
						if !stream {
							if txt := api.text(answer); !strings.HasPrefix(txt, "BUDGET_EXCEEDED:") {
								t.Errorf("answer %s; want BUDGET_EXCEEDED in the API's shape", answer)
							}
						} else if !strings.Contains(answer, "BUDGET_EXCEEDED:") || !strings.Contains(answer, api.streamEnd) {
							t.Errorf("streamed answer %s; want BUDGET_EXCEEDED ended by %s", answer, api.streamEnd)
						}
					}
				}
				resp, _ := budgetRequest(t, base, api.pathOf(stream), "fresh", body)
				if a := resp.Header.Get(HeaderAction); a != "none" {
					t.Errorf("a fresh session beside the spent one: action %q", a)
				}
			})
		}
	}
}

// TestBudgetTurnsAndOverrides: the turn budget counts model calls; a
// per-model override and a session's own (set through the admin API)
// change it; terminate_as = "error" answers BUDGET_EXCEEDED as an error of
// its own type.
func TestBudgetTurnsAndOverrides(t *testing.T) {
	up := budgetUpstream(t)
	srv, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = up.URL()
		c.Policy.SessionMaxTurns = 5
		c.Policy.Models = map[string]policy.Budget{"claude-*": {MaxTurns: 10}}
		c.Inject.TerminateAs = "error"
	})
	chat, anthropic := budgetAPIs[0], budgetAPIs[2]
	run := func(api budgetAPI, session string, want ...string) string {
		t.Helper()
		var last string
		for i, w := range want {
			resp, answer := budgetRequest(t, base, api.path, session, api.body(false))
			if a := resp.Header.Get(HeaderAction); a != w {
				t.Fatalf("%s %s request %d: action %q; want %q (%s)", api.name, session, i+1, a, w, answer)
			}
			last = answer
		}
		return last
	}
	end := run(chat, "chat", "none", "none", "none", "none", "warn", "terminate")
	if gjson.Get(end, "error.code").String() != "BUDGET_EXCEEDED" || gjson.Get(end, "error.type").String() != "budget_exceeded" {
		t.Errorf("error form: %s", end)
	}
	end = run(anthropic, "claude", "none", "none", "none", "none", "none", "none", "none", "none", "warn", "none", "terminate")
	if gjson.Get(end, "error.type").String() != "budget_exceeded" || !strings.HasPrefix(gjson.Get(end, "error.message").String(), "BUDGET_EXCEEDED:") {
		t.Errorf("anthropic error form: %s", end)
	}

	// Gemini's error shape: RESOURCE_EXHAUSTED, Google's status for a
	// spent quota, with the error form's status (not 429, which Gemini
	// CLI retries).
	for _, gemini := range budgetAPIs[4:] {
		end = run(gemini, gemini.name, "none", "none", "none", "none", "warn", "terminate")
		if e := gjson.Get(end, "error"); e.Get("status").String() != "RESOURCE_EXHAUSTED" || e.Get("code").Int() != 422 ||
			!strings.HasPrefix(e.Get("message").String(), "BUDGET_EXCEEDED:") {
			t.Errorf("%s error form: %s", gemini.name, end)
		}
	}

	if err := srv.pipeline.policy.SetBudget(t.Context(), "override", &policy.Budget{MaxTurns: -1}); err != nil {
		t.Fatal(err)
	}
	run(chat, "override", "none", "none", "none", "none", "none", "none", "none")

	// The timeline, the session's summary and the metrics tell budget
	// decisions from loops.
	sum, tl, ok := srv.Recorder().Session("chat")
	if !ok || len(tl) != 6 || sum.Detections != 0 || sum.Interventions != 2 {
		t.Fatalf("session chat: %+v, %d entries; want 6 requests, no detection, 2 interventions", sum, len(tl))
	}
	warned, ended := tl[4], tl[5]
	if warned.Action != policy.Warn || warned.Budget == nil || warned.Budget.Exceeded || warned.Budget.Used != 4 ||
		ended.Action != policy.Terminate || ended.Budget == nil || !ended.Budget.Exceeded || ended.Category != "" {
		t.Errorf("timeline ends with %+v %+v and %+v %+v; want the budget's warn and terminate", warned, warned.Budget, ended, ended.Budget)
	}
	mresp, err := newClient().Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`loopguard_terminations_total{category="budget"} 6`,
		`loopguard_interventions_total{action="warn",category="budget",level="none"} 6`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
}

// TestBudgetOnSocket: the turns of a Responses WebSocket session count
// toward its budgets, turns and the tokens each response.completed
// reports, as its HTTP requests do; the spent session gets BUDGET_EXCEEDED
// as a response's events on the socket without the upstream seeing the
// turn, and the socket stays open.
func TestBudgetOnSocket(t *testing.T) {
	for _, tt := range []struct {
		name   string
		budget func(*Config)
		want   []string
	}{
		{"turns", func(c *Config) { c.Policy.SessionMaxTurns = 5 }, []string{"none", "none", "none", "none", "warn", "terminate"}},
		// 150 tokens an answer: the third is past 80 % of 375.
		{"tokens", func(c *Config) { c.Policy.SessionMaxTokens = 375 }, []string{"none", "none", "warn", "terminate"}},
		{"error form", func(c *Config) { c.Policy.SessionMaxTurns = 5; c.Inject.TerminateAs = "error" }, []string{"none", "none", "none", "none", "warn", "terminate"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := startSocketUpstream(t, usageTurn)
			addr, events := startSocketProxy(t, up.URL, tt.budget)
			c := dialSocket(t, addr, "/s/spent/v1/responses", nil)
			defer c.Close()
			turn := func(i int) []string {
				t.Helper()
				msg := fmt.Sprintf(`{"type":"response.create","model":"gpt-4.1","input":"Do step %d."}`, i)
				if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				return readTurn(t, c)
			}
			var last []string
			for i := range tt.want {
				last = turn(i + 1)
				// The turn's usage is counted once its answer ended, which
				// is reported after the client read it.
				waitChatEvents(t, events, i+1)
			}
			var actions []string
			for _, e := range waitChatEvents(t, events, len(tt.want)) {
				actions = append(actions, string(e.Decision.Action))
			}
			if got, want := strings.Join(actions, ","), strings.Join(tt.want, ","); got != want {
				t.Errorf("actions %s; want %s", got, want)
			}
			got, _ := up.snapshot()
			if len(got) != len(tt.want)-1 {
				t.Fatalf("the upstream got %d turns; want %d, the spent session's not among them", len(got), len(tt.want)-1)
			}
			if warned := got[len(got)-1]; !strings.Contains(warned, "Session budget: ") {
				t.Errorf("the warned turn lacks the budget warning: %s", warned)
			}
			checkBudgetEvents(t, last)
			// The socket stays open: the next turn of the spent session is
			// answered on it, again without the upstream.
			checkBudgetEvents(t, turn(len(tt.want)+1))
			if got, _ := up.snapshot(); len(got) != len(tt.want)-1 {
				t.Errorf("the upstream got a turn of the spent session")
			}
		})
	}
}

// usageTurn answers a socket's turn n with a response whose usage is 150
// tokens.
func usageTurn(n int, _ string, send func(string) error) {
	id := fmt.Sprintf("resp_%d", n)
	item := fmt.Sprintf(`{"id":"msg_%d","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Step %d done."}]}`, n, n)
	for _, ev := range []string{
		fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":{"id":%q,"object":"response","status":"in_progress","model":"gpt-4.1","output":[]}}`, id),
		fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":1,"output_index":0,"item":%s}`, item),
		fmt.Sprintf(`{"type":"response.completed","sequence_number":2,"response":{"id":%q,"object":"response","status":"completed","model":"gpt-4.1","output":[%s],"usage":{"input_tokens":100,"output_tokens":50,"total_tokens":150}}}`, id, item),
	} {
		if send(ev) != nil {
			return
		}
	}
}

// startStoreProxy starts a proxy whose sessions have a token budget and
// whose policy keeps them in store, reporting chat events to done.
func startStoreProxy(t *testing.T, up string, store policy.Store, done func(*ChatEvent)) string {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Upstream.URL = up
	cfg.Policy.SessionMaxTokens = 1000
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	srv, err := New(cfg, zerolog.Nop(), WithChatDone(done))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv.pipeline.policy = policy.New(cfg.Policy, store, zerolog.Nop())
	return serveProxy(t, srv)
}

// TestBudgetUsageCountedBeforeReport: an answer's tokens are in its
// session's budget by the time its chat event is reported, whether the
// answer came as an HTTP body, an HTTP stream or a socket's turn: whatever
// waits for the event to send the next turn has that turn decided against
// a count that holds the answer.
func TestBudgetUsageCountedBeforeReport(t *testing.T) {
	for _, tt := range answerPaths {
		t.Run(tt.name, func(t *testing.T) {
			store := policy.NewMemoryStore(0, 0)
			counted := make(chan int64, 1)
			done := func(e *ChatEvent) {
				st, err := store.Load(context.Background(), e.Session)
				if err != nil {
					t.Error(err)
				}
				counted <- st.Tokens
			}
			budgetAnswer(t, store, done, tt.stream, tt.socket)
			select {
			case n := <-counted:
				if n != 150 {
					t.Errorf("the session's budget held %d tokens when the answer was reported; want its 150", n)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no chat event 10 s after the answer")
			}
		})
	}
}

// gatedStore is a session store whose updates that count tokens wait
// until gate is closed or wait has passed: it holds a turn's usage back
// until the client has had the turn's answer, if the client can have it
// first.
type gatedStore struct {
	policy.Store
	gate chan struct{}
	wait time.Duration
	// late is sent whether the gate was closed when the first update that
	// counts tokens came through.
	late chan bool
}

func (s *gatedStore) Update(ctx context.Context, key string, fn func(*policy.State) error) (policy.State, error) {
	// fn is a pure function of the state (policy.Store), so a trial on an
	// empty one tells the usage from the turn's other updates (its
	// decision, its record).
	var trial policy.State
	if fn(&trial) != nil || trial.Tokens == 0 {
		return s.Store.Update(ctx, key, fn)
	}
	late := true
	select {
	case <-s.gate:
	case <-time.After(s.wait):
		late = false
	}
	st, err := s.Store.Update(ctx, key, fn)
	select {
	case s.late <- late:
	default:
	}
	return st, err
}

// TestBudgetUsageBeforeAnswerEnd: an answer's tokens are in its session's
// budget before the client has the answer's end, after which an agent
// sends its next turn at once: an HTTP answer's end comes after its
// response is accounted for, a socket turn's response.completed before the
// upstream's reader ends the turn, while the client's reader may decide
// the next. A store that takes its time (the gate) makes the losing order
// certain where it can happen.
func TestBudgetUsageBeforeAnswerEnd(t *testing.T) {
	for _, tt := range answerPaths {
		t.Run(tt.name, func(t *testing.T) {
			store := &gatedStore{Store: policy.NewMemoryStore(0, 0), gate: make(chan struct{}), wait: 300 * time.Millisecond,
				late: make(chan bool, 1)}
			budgetAnswer(t, store, nil, tt.stream, tt.socket)
			close(store.gate)
			select {
			case late := <-store.late:
				if late {
					t.Error("the answer's usage was counted after the client had the answer's end; want before")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the answer's usage was not counted 10 s after its end")
			}
		})
	}
}

// answerPaths are the ways an answer reaches its client, for budgetAnswer:
// an HTTP body, an HTTP stream, a socket's turn.
var answerPaths = []struct {
	name           string
	stream, socket bool
}{
	{"body", false, false},
	{"stream", true, false},
	{"socket", true, true},
}

// budgetAnswer has a proxy that keeps its sessions in store and reports to
// done answer one turn of a session: an HTTP chat request, streamed or
// not, or a response.create on a socket. It returns once the client has
// the whole answer.
func budgetAnswer(t *testing.T, store policy.Store, done func(*ChatEvent), stream, socket bool) {
	t.Helper()
	if !socket {
		chat := budgetAPIs[0]
		base := startStoreProxy(t, budgetUpstream(t).URL(), store, done)
		budgetRequest(t, base, chat.path, "spent", chat.body(stream))
		return
	}
	up := startSocketUpstream(t, usageTurn)
	addr := strings.TrimPrefix(startStoreProxy(t, up.URL, store, done), "http://")
	c := dialSocket(t, addr, "/s/spent/v1/responses", nil)
	defer c.Close()
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-4.1","input":"Do step 1."}`)); err != nil {
		t.Fatal(err)
	}
	readTurn(t, c)
}

// checkBudgetEvents checks that a socket's answer is BUDGET_EXCEEDED as a
// response's events, response.created to response.completed, or in the
// error form as one error event.
func checkBudgetEvents(t *testing.T, evs []string) {
	t.Helper()
	if e := gjson.Get(evs[len(evs)-1], "error"); e.Exists() {
		if len(evs) != 1 || gjson.Get(evs[0], "type").String() != "error" || e.Get("code").String() != "BUDGET_EXCEEDED" ||
			!strings.HasPrefix(e.Get("message").String(), "BUDGET_EXCEEDED:") {
			t.Errorf("answer %v; want one error event of code BUDGET_EXCEEDED", evs)
		}
		return
	}
	var text string
	for _, m := range evs {
		if gjson.Get(m, "type").String() == "response.output_text.delta" {
			text += gjson.Get(m, "delta").String()
		}
	}
	if !strings.HasPrefix(text, "BUDGET_EXCEEDED:") || gjson.Get(evs[0], "type").String() != "response.created" ||
		gjson.Get(evs[len(evs)-1], "type").String() != "response.completed" {
		t.Errorf("answer of %d events, text %.40q; want response.created ... response.completed with BUDGET_EXCEEDED", len(evs), text)
	}
}
