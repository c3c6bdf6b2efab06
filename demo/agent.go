package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// systemPrompt and task are what every scripted agent starts from.
const (
	systemPrompt = "You are a coding agent. Use the bash tool to run commands in the repository."
	task         = "Build the project."
)

// bashTool is the one tool the scripted agents offer, in the shape real
// coding agents declare it.
var bashTool = openai.Tool{
	Type: openai.ToolTypeFunction,
	Function: &openai.FunctionDefinition{
		Name:        "bash",
		Description: "Run a shell command and return its output.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string",` +
			`"description":"the command line"}},"required":["command"]}`),
	},
}

// makefile is the repository's Makefile as `cat Makefile` shows it.
const makefile = "# Makefile\nall:\n\tgo build -o bin/app ./cmd/app\n\ntest:\n\tgo test ./...\n"

// runTool executes a scripted bash call. The repository is imaginary: the
// results are canned, and `make build` fails the same way every time, which
// is what makes the stubborn agent loop.
func runTool(name, arguments string) (output string, exit int) {
	if name != "bash" {
		return name + ": no such tool", 127
	}
	var args struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "bash: invalid arguments", 2
	}
	switch strings.TrimSpace(args.Command) {
	case cmdBuild:
		return "make: *** No rule to make target 'build'.  Stop.", 2
	case cmdMakefile:
		return makefile, 0
	case cmdAll:
		return "go build -o bin/app ./cmd/app", 0
	}
	return "bash: " + args.Command + ": command not found", 127
}

// toolContent is the tool message an agent sends back, exit code first as
// many agent frameworks do.
func toolContent(output string, exit int) string {
	return fmt.Sprintf("exit code %d\n%s", exit, output)
}

// sessionDoer sends every request with a fixed X-Session-ID, so each
// scenario is one loopguard session whatever its history looks like.
type sessionDoer struct {
	client  *http.Client
	session string
}

func (d sessionDoer) Do(req *http.Request) (*http.Response, error) {
	req.Header.Set("X-Session-ID", d.session)
	return d.client.Do(req)
}

// agent is a scripted agent: a real OpenAI client that carries the whole
// history on every turn, as agent frameworks do, and runs its tools itself.
type agent struct {
	client   *openai.Client
	model    string
	session  string
	messages []openai.ChatCompletionMessage
}

func newAgent(baseURL string, hc *http.Client, model, session string) *agent {
	cfg := openai.DefaultConfig("sk-demo-any-key")
	cfg.BaseURL = baseURL
	cfg.HTTPClient = sessionDoer{client: hc, session: session}
	return &agent{
		client:  openai.NewClientWithConfig(cfg),
		model:   model,
		session: session,
		messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: systemPrompt},
			{Role: openai.ChatMessageRoleUser, Content: task},
		},
	}
}

// reply is what the agent got back for one turn.
type reply struct {
	message openai.ChatCompletionMessage
	finish  openai.FinishReason
	header  http.Header
}

// ask sends the history and appends the model's answer to it.
func (a *agent) ask(ctx context.Context) (reply, error) {
	resp, err := a.client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
		Model:    a.model,
		Messages: a.messages,
		Tools:    []openai.Tool{bashTool},
	})
	if err != nil {
		return reply{}, fmt.Errorf("chat completion: %w", err)
	}
	if len(resp.Choices) == 0 {
		return reply{}, errors.New("chat completion: no choices")
	}
	msg := resp.Choices[0].Message
	a.messages = append(a.messages, msg)
	return reply{message: msg, finish: resp.Choices[0].FinishReason, header: resp.Header()}, nil
}

// answer appends a tool result to the history.
func (a *agent) answer(callID, content string) {
	a.messages = append(a.messages, openai.ChatCompletionMessage{
		Role: openai.ChatMessageRoleTool, ToolCallID: callID, Content: content,
	})
}

// stream sends the history with stream: true and collects the text.
func (a *agent) stream(ctx context.Context) (reply, error) {
	s, err := a.client.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{
		Model:    a.model,
		Messages: a.messages,
		Stream:   true,
		// Real clients bound the answer; the proxy estimates the tokens a
		// cut saved from it. max_tokens, not max_completion_tokens: the
		// local servers the demo may run against read only the older name.
		MaxTokens: 1024, //lint:ignore SA1019 see above

	})
	if err != nil {
		return reply{}, fmt.Errorf("chat completion stream: %w", err)
	}
	defer s.Close()
	var text strings.Builder
	var finish openai.FinishReason
	for {
		chunk, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return reply{}, fmt.Errorf("chat completion stream: %w", err)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text.String()}
	a.messages = append(a.messages, msg)
	return reply{message: msg, finish: finish, header: s.Header()}, nil
}
