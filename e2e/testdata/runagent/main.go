// Command runagent is a minimal coding agent for the e2e tests of
// `loopguard run`: it speaks chat completions to $OPENAI_BASE_URL, else
// https://api.openai.com/v1 (as the OpenAI SDKs read it), runs the tool calls the model makes with scripted
// results, and stops when the model answers without one.
//
//	runagent [-exit N] [-max N] [-wait] [-both] [-stream]
//
// It prints one line per turn, "final: TEXT" at the end, "calls: N" and
// "sessions: KEYS" (the distinct X-Loopguard-Session values it saw), then
// exits with -exit's code; 4 when -max turns pass without a final answer.
// With -wait it prints "waiting" and blocks until a signal ends it. With
// -both it makes one call on each wire API instead, chat completions at
// $OPENAI_BASE_URL and Anthropic Messages at $ANTHROPIC_BASE_URL, else
// https://api.anthropic.com (as Claude Code reads it), and prints their
// statuses. Its HTTP client is Go's default: it honours HTTPS_PROXY and,
// on Linux, SSL_CERT_FILE. With -stream it makes one
// streamed call, prints "streaming" once the answer starts, and reads it to
// its end.
package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"
)

type message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func main() {
	exit := flag.Int("exit", 0, "exit code after a final answer")
	maxTurns := flag.Int("max", 12, "turns before giving up")
	wait := flag.Bool("wait", false, "print waiting and block until a signal")
	both := flag.Bool("both", false, "one call on each wire API")
	stream := flag.Bool("stream", false, "one streamed call, read to its end")
	flag.Parse()
	if *wait {
		fmt.Println("waiting")
		time.Sleep(time.Minute) // the test's signal ends it long before
		os.Exit(5)
	}
	base := os.Getenv("OPENAI_BASE_URL")
	if base == "" {
		base = "https://api.openai.com/v1"
	}
	text := func(s string) *string { return &s }
	msgs := []message{
		{Role: "system", Content: text("You are a coding agent.")},
		{Role: "user", Content: text("Make the build pass.")},
	}
	a := agent{base: base, msgs: msgs, sessions: map[string]bool{}, client: &http.Client{Timeout: 30 * time.Second}}
	code := *exit
	switch {
	case *both:
		a.callBoth()
	case *stream:
		a.callStream()
	default:
		code = a.run(*maxTurns, *exit)
	}
	keys := make([]string, 0, len(a.sessions))
	for k := range a.sessions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("calls: %d\nsessions: %s\n", a.calls, strings.Join(keys, " "))
	os.Exit(code)
}

type agent struct {
	base     string
	msgs     []message
	sessions map[string]bool
	calls    int
	client   *http.Client
}

// run talks to the model until it answers without a tool call (exit) or
// maxTurns pass (4); 3 when the model cannot be reached.
func (a *agent) run(maxTurns, exit int) int {
	text := func(s string) *string { return &s }
	for turn := 0; turn < maxTurns; turn++ {
		body, _ := json.Marshal(map[string]any{"model": "fake-model", "messages": a.msgs})
		req, _ := http.NewRequest(http.MethodPost, strings.TrimRight(a.base, "/")+"/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_API_KEY"))
		resp, err := a.client.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, "runagent:", err)
			return 3
		}
		a.calls++
		a.sessions[resp.Header.Get("X-Loopguard-Session")] = true
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var answer struct {
			Choices []struct {
				Message message `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &answer); err != nil || len(answer.Choices) == 0 {
			fmt.Fprintf(os.Stderr, "runagent: status %d: %s\n", resp.StatusCode, b)
			return 3
		}
		m := answer.Choices[0].Message
		a.msgs = append(a.msgs, m)
		if len(m.ToolCalls) == 0 {
			content := ""
			if m.Content != nil {
				content, _, _ = strings.Cut(*m.Content, "\n")
			}
			fmt.Printf("final: %s\n", content)
			return exit
		}
		for _, c := range m.ToolCalls {
			fmt.Printf("turn %d: %s %s\n", turn+1, c.Function.Name, c.Function.Arguments)
			a.msgs = append(a.msgs, message{Role: "tool", ToolCallID: c.ID, Content: text(shell(c.Function.Arguments))})
		}
	}
	return 4
}

// callBoth makes one chat completions call and one Anthropic Messages call.
func (a *agent) callBoth() {
	calls := []struct {
		url, body string
		anthropic bool
	}{
		{strings.TrimRight(a.base, "/") + "/chat/completions",
			`{"model":"fake-model","messages":[{"role":"user","content":"Say hi."}]}`, false},
		{strings.TrimRight(cmp.Or(os.Getenv("ANTHROPIC_BASE_URL"), "https://api.anthropic.com"), "/") + "/v1/messages",
			`{"model":"claude-fake","max_tokens":64,"messages":[{"role":"user","content":"Say hi."}]}`, true},
	}
	for _, c := range calls {
		req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		if c.anthropic {
			req.Header.Set("anthropic-version", "2023-06-01")
		}
		resp, err := a.client.Do(req)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		a.calls++
		a.sessions[resp.Header.Get("X-Loopguard-Session")] = true
		fmt.Println("status:", resp.StatusCode)
	}
}

// callStream makes one streamed chat call and reads the answer to its end.
func (a *agent) callStream() {
	body := `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"Write a long story."}]}`
	resp, err := a.client.Post(strings.TrimRight(a.base, "/")+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer resp.Body.Close()
	a.calls++
	a.sessions[resp.Header.Get("X-Loopguard-Session")] = true
	fmt.Println("streaming")
	_, _ = io.Copy(io.Discard, resp.Body)
}

// shell is the agent's only tool, whose results are scripted.
func shell(args string) string {
	var a struct{ Command string }
	_ = json.Unmarshal([]byte(args), &a)
	if a.Command == "make build" {
		return "make: *** No rule to make target 'build'.  Stop."
	}
	return "ok: " + a.Command
}
