package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	sashabaranov "github.com/sashabaranov/go-openai"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// outcome is what one client call produced, in a client-neutral form.
type outcome struct {
	Content   string
	Reasoning string
	Calls     []call
	Finish    string
	Usage     *usage
	Err       string
}

type usage struct{ Prompt, Completion, Total int64 }

// testTimeout bounds every client call; loopback answers take milliseconds.
const testTimeout = 15 * time.Second

// newTransport returns a private transport, closed when the test ends, so
// no connection outlives the test (goleak).
func newTransport(t *testing.T) *http.Transport {
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// chatRequestJSON is the body the raw client sends: tools, a system prompt,
// unusual-but-valid JSON spacing and an unknown field, all of which a
// transparent proxy must forward untouched.
func chatRequestJSON(stream bool) string {
	s := "false"
	if stream {
		s = `true, "stream_options": {"include_usage": true}`
	}
	return `{"model": "fake-model",  "x_unknown_field": {"keep": [1, 2.50, "é"]},
 "messages": [{"role": "system", "content": "You are a coding agent."},
  {"role": "user", "content": "Read src/main.go and run the tests."}],
 "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
 "stream": ` + s + `}`
}

// --- sashabaranov/go-openai ---

func goOpenAI(t *testing.T, base string, stream bool) outcome {
	t.Helper()
	cfg := sashabaranov.DefaultConfig("sk-e2e")
	cfg.BaseURL = base + "/v1"
	cfg.HTTPClient = &http.Client{Transport: newTransport(t)}
	client := sashabaranov.NewClientWithConfig(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req := sashabaranov.ChatCompletionRequest{
		Model: "fake-model",
		Messages: []sashabaranov.ChatCompletionMessage{
			{Role: "system", Content: "You are a coding agent."},
			{Role: "user", Content: "Read src/main.go and run the tests."},
		},
		Tools: []sashabaranov.Tool{{Type: "function", Function: &sashabaranov.FunctionDefinition{
			Name: "read_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`),
		}}},
	}
	var out outcome
	if !stream {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			out.Err = err.Error()
			return out
		}
		m := resp.Choices[0].Message
		out.Content, out.Reasoning, out.Finish = m.Content, m.ReasoningContent, string(resp.Choices[0].FinishReason)
		for _, tc := range m.ToolCalls {
			out.Calls = append(out.Calls, call{tc.Function.Name, tc.Function.Arguments})
		}
		out.Usage = &usage{int64(resp.Usage.PromptTokens), int64(resp.Usage.CompletionTokens), int64(resp.Usage.TotalTokens)}
		return out
	}
	req.Stream = true
	req.StreamOptions = &sashabaranov.StreamOptions{IncludeUsage: true}
	st, err := client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		out.Err = err.Error()
		return out
	}
	defer st.Close()
	acc := map[int]*call{}
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			out.Err = err.Error()
			break
		}
		if chunk.Usage != nil {
			out.Usage = &usage{int64(chunk.Usage.PromptTokens), int64(chunk.Usage.CompletionTokens), int64(chunk.Usage.TotalTokens)}
		}
		for _, ch := range chunk.Choices {
			out.Content += ch.Delta.Content
			out.Reasoning += ch.Delta.ReasoningContent
			for _, tc := range ch.Delta.ToolCalls {
				i := 0
				if tc.Index != nil {
					i = *tc.Index
				}
				c := acc[i]
				if c == nil {
					c = &call{}
					acc[i] = c
				}
				if tc.Function.Name != "" {
					c.Name = tc.Function.Name
				}
				c.Args += tc.Function.Arguments
			}
			if ch.FinishReason != "" {
				out.Finish = string(ch.FinishReason)
			}
		}
	}
	out.Calls = sortedCalls(acc)
	return out
}

func sortedCalls(acc map[int]*call) []call {
	idx := make([]int, 0, len(acc))
	for i := range acc {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []call
	for _, i := range idx {
		out = append(out, *acc[i])
	}
	return out
}

// --- openai/openai-go ---

func officialGo(t *testing.T, base string, stream bool) outcome {
	t.Helper()
	client := oai.NewClient(
		option.WithBaseURL(base+"/v1/"),
		option.WithAPIKey("sk-e2e"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: newTransport(t)}),
	)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	params := oai.ChatCompletionNewParams{
		Model: "fake-model",
		Messages: []oai.ChatCompletionMessageParamUnion{
			oai.SystemMessage("You are a coding agent."),
			oai.UserMessage("Read src/main.go and run the tests."),
		},
		Tools: []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:       "read_file",
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}},
		})},
	}
	var out outcome
	if !stream {
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			out.Err = err.Error()
			return out
		}
		m := resp.Choices[0].Message
		out.Content, out.Finish = m.Content, resp.Choices[0].FinishReason
		for _, tc := range m.ToolCalls {
			out.Calls = append(out.Calls, call{tc.Function.Name, tc.Function.Arguments})
		}
		out.Usage = &usage{resp.Usage.PromptTokens, resp.Usage.CompletionTokens, resp.Usage.TotalTokens}
		return out
	}
	params.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	st := client.Chat.Completions.NewStreaming(ctx, params)
	defer st.Close()
	acc := map[int]*call{}
	for st.Next() {
		chunk := st.Current()
		if chunk.JSON.Usage.Valid() && chunk.Usage.TotalTokens > 0 {
			out.Usage = &usage{chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens, chunk.Usage.TotalTokens}
		}
		for _, ch := range chunk.Choices {
			out.Content += ch.Delta.Content
			for _, tc := range ch.Delta.ToolCalls {
				c := acc[int(tc.Index)]
				if c == nil {
					c = &call{}
					acc[int(tc.Index)] = c
				}
				if tc.Function.Name != "" {
					c.Name = tc.Function.Name
				}
				c.Args += tc.Function.Arguments
			}
			if ch.FinishReason != "" {
				out.Finish = ch.FinishReason
			}
		}
	}
	if err := st.Err(); err != nil {
		out.Err = err.Error()
	}
	out.Calls = sortedCalls(acc)
	return out
}

// --- Node openai package ---

// nodeDir is the Node client's directory.
const nodeDir = "node"

// findNode locates node and the installed openai package.
func findNode() (string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "openai")); err != nil {
		return "", fmt.Errorf("e2e/node/node_modules missing (run npm ci in e2e/node): %w", err)
	}
	return node, nil
}

// nodeOrSkip returns node. Without it, it fails the test when
// LOOPGUARD_REQUIRE_NODE is set (CI runs npm ci first); otherwise it
// returns "" after a skipped subtest "node-openai" that says why, so the
// test's Go clients still run and the missing Node client shows as skipped,
// not as passed.
func nodeOrSkip(t *testing.T) string {
	t.Helper()
	node, err := findNode()
	if err != nil {
		if os.Getenv("LOOPGUARD_REQUIRE_NODE") != "" {
			t.Fatalf("node client unavailable and LOOPGUARD_REQUIRE_NODE is set: %v", err)
		}
		t.Run("node-openai", func(t *testing.T) { t.Skipf("Node client unavailable: %v", err) })
		return ""
	}
	return node
}

// nodeResult is client.mjs's summary of one call.
type nodeResult struct {
	Scenario  string `json:"scenario"`
	Content   string `json:"content"`
	Reasoning string `json:"reasoning"`
	ToolCalls []call `json:"tool_calls"`
	Finish    string `json:"finish_reason"`
	Usage     *struct {
		Prompt     int64 `json:"prompt_tokens"`
		Completion int64 `json:"completion_tokens"`
		Total      int64 `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
}

// nodeOpenAI runs node/client.mjs for one scenario ("stream-usage" or
// "nonstream") and converts its summary.
func nodeOpenAI(t *testing.T, node, base string, stream bool) outcome {
	t.Helper()
	scn := "nonstream"
	if stream {
		scn = "stream-usage"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", base+"/v1", scn)
	cmd.Dir = nodeDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs %s: %v\nstderr: %s", scn, err, stderr.String())
	}
	var sum struct{ Calls []nodeResult }
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil || len(sum.Calls) != 1 {
		t.Fatalf("node summary %q: %v", stdout.String(), err)
	}
	r := sum.Calls[0]
	out := outcome{Content: r.Content, Reasoning: r.Reasoning, Calls: r.ToolCalls, Finish: r.Finish}
	if r.Usage != nil {
		out.Usage = &usage{r.Usage.Prompt, r.Usage.Completion, r.Usage.Total}
	}
	if r.Error != nil {
		out.Err = r.Error.Name + ": " + r.Error.Message
	}
	return out
}

// checkOutcome asserts what a client parsed against the scenario.
func checkOutcome(t *testing.T, clientName string, got outcome, sc scenario, stream bool) {
	t.Helper()
	w := sc.want
	if w.failStream {
		if got.Err == "" {
			t.Errorf("%s: got no error for an answer that fails (%+v)", clientName, got)
		}
		if stream && !strings.HasPrefix(sc.resp.Content, got.Content) {
			t.Errorf("%s: content before the error = %q; want a prefix of %q", clientName, got.Content, sc.resp.Content)
		}
		return
	}
	if got.Err != "" {
		t.Errorf("%s: error %s", clientName, got.Err)
		return
	}
	if got.Content != w.content {
		t.Errorf("%s: content = %q; want %q", clientName, got.Content, w.content)
	}
	if len(got.Calls) != len(w.calls) {
		t.Errorf("%s: tool calls = %+v; want %+v", clientName, got.Calls, w.calls)
	} else {
		for i := range w.calls {
			if got.Calls[i] != w.calls[i] {
				t.Errorf("%s: tool call %d = %+v; want %+v", clientName, i, got.Calls[i], w.calls[i])
			}
		}
	}
	if got.Finish != w.finish {
		t.Errorf("%s: finish_reason = %q; want %q", clientName, got.Finish, w.finish)
	}
	if got.Usage == nil || got.Usage.Total == 0 || got.Usage.Total != got.Usage.Prompt+got.Usage.Completion {
		t.Errorf("%s: usage = %+v; want prompt+completion=total > 0", clientName, got.Usage)
	}
}
