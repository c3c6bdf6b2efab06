package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/policy"
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
}

const budgetUser = `"Summarise the repository."`

var budgetAPIs = []budgetAPI{
	{"chat", "/v1/chat/completions",
		func(s bool) string {
			return fmt.Sprintf(`{"model":"gpt-4.1","stream":%v,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%s}]}`, s, budgetUser)
		},
		150, func(a string) string { return gjson.Get(a, "choices.0.message.content").String() }, "data: [DONE]"},
	{"responses", "/v1/responses",
		func(s bool) string { return fmt.Sprintf(`{"model":"gpt-4.1","stream":%v,"input":%s}`, s, budgetUser) },
		150, func(a string) string { return gjson.Get(a, "output.0.content.0.text").String() }, "response.completed"},
	{"anthropic", "/v1/messages",
		func(s bool) string {
			return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":%v,"messages":[{"role":"user","content":%s}]}`, s, budgetUser)
		},
		150, func(a string) string { return gjson.Get(a, "content.0.text").String() }, "message_stop"},
	{"ollama", "/api/chat",
		func(s bool) string {
			return fmt.Sprintf(`{"model":"qwen3","stream":%v,"messages":[{"role":"user","content":%s}]}`, s, budgetUser)
		},
		// prompt_eval_count 10, eval_count a quarter of the text's bytes.
		10 + int64((len(budgetText)+3)/4), func(a string) string { return gjson.Get(a, "message.content").String() }, `"done":true`},
}

// budgetText is every scripted answer's text.
var budgetText = strings.Repeat("The repository holds a proxy. ", 4)

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
					resp, answer := budgetRequest(t, base, api.path, "spent", body)
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
				resp, _ := budgetRequest(t, base, api.path, "fresh", body)
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
		`loopguard_terminations_total{category="budget"} 2`,
		`loopguard_interventions_total{action="warn",category="budget",level="0"} 2`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
}
