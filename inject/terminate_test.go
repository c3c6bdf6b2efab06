package inject

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"
)

// stableInjector returns an injector with a fixed clock and id source, so
// its answers can be compared with golden files.
func stableInjector(t testing.TB, cfg Config) *Injector {
	t.Helper()
	in, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in.now = func() time.Time { return time.Unix(1761000000, 0) }
	in.random = bytes.NewReader(bytes.Repeat([]byte{0xab}, 1<<12))
	return in
}

func TestTerminateGolden(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		give       string // request body
		wantStatus int
		wantType   string
	}{
		{"message", Config{}, `{"model":"gpt-4.1","messages":[]}`, 200, contentJSON},
		{"stream", Config{}, `{"model":"gpt-4.1","stream":true,"messages":[]}`, 200, contentSSE},
		{"stream-usage", Config{}, `{"model":"gpt-4.1","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, 200, contentSSE},
		{"error", Config{TerminateAs: AsError}, `{"model":"gpt-4.1","stream":true,"messages":[]}`, 422, contentJSON},
		{"error-400", Config{TerminateAs: AsError, ErrorStatus: 400}, `{"messages":[]}`, 400, contentJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := stableInjector(t, tt.cfg)
			res, err := in.Terminate([]byte(tt.give), Loop{Verdict: readVerdict(t, "tool_repetition"), Failed: []string{"git status, five times"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.wantStatus {
				t.Errorf("Status = %d; want %d", res.Status, tt.wantStatus)
			}
			if got := header(res, "Content-Type"); got != tt.wantType {
				t.Errorf("Content-Type = %q; want %q", got, tt.wantType)
			}
			if tt.cfg.TerminateAs == AsError {
				if got := header(res, "X-Should-Retry"); got != "false" {
					t.Errorf("X-Should-Retry = %q; want false", got)
				}
				e := gjson.GetBytes(res.Body, "error")
				if e.Get("type").String() != LoopErrorType || e.Get("code").String() != LoopErrorCode ||
					!strings.HasPrefix(e.Get("message").String(), TerminatePrefix) || e.Get("param").Type != gjson.Null {
					t.Errorf("error body = %s", res.Body)
				}
			}
			golden(t, "terminate/"+tt.name+".txt", res.Body)
		})
	}
}

func header(r Response, name string) string {
	for _, h := range r.Header {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

// sdkServer answers every request with in.Terminate and counts requests, so
// that a test can tell an SDK retried.
func sdkServer(t *testing.T, in *Injector) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	v := readVerdict(t, "tool_repetition")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		body, _ := io.ReadAll(r.Body)
		res, err := in.Terminate(body, Loop{Verdict: v})
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		for _, h := range res.Header {
			w.Header().Set(h.Name, h.Value)
		}
		w.WriteHeader(res.Status)
		_, _ = w.Write(res.Body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestTerminateGoOpenAI(t *testing.T) {
	srv, _ := sdkServer(t, newTestInjector(t))
	cfg := goopenai.DefaultConfig("test")
	cfg.BaseURL = srv.URL + "/v1"
	client := goopenai.NewClientWithConfig(cfg)
	ctx := context.Background()
	req := goopenai.ChatCompletionRequest{Model: "gpt-4.1", Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "hi"}}}

	res, err := client.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if len(res.Choices) != 1 || res.Choices[0].FinishReason != goopenai.FinishReasonStop ||
		!strings.HasPrefix(res.Choices[0].Message.Content, TerminatePrefix) || len(res.Choices[0].Message.ToolCalls) != 0 ||
		res.Model != "gpt-4.1" || !strings.HasPrefix(res.ID, idPrefix) || res.Object != "chat.completion" {
		t.Errorf("CreateChatCompletion = %+v", res)
	}

	req.Stream = true
	req.StreamOptions = &goopenai.StreamOptions{IncludeUsage: true}
	stream, err := client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatalf("CreateChatCompletionStream: %v", err)
	}
	defer stream.Close()
	var content strings.Builder
	var finish goopenai.FinishReason
	usage := 0
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if chunk.Usage != nil {
			usage++
		}
		for _, c := range chunk.Choices {
			content.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if !strings.HasPrefix(content.String(), TerminatePrefix) || finish != goopenai.FinishReasonStop || usage != 1 {
		t.Errorf("stream: content %q, finish %q, %d usage chunks; want LOOP_DETECTED content, stop, 1", content.String(), finish, usage)
	}
}

func TestTerminateOpenAIGo(t *testing.T) {
	srv, _ := sdkServer(t, newTestInjector(t))
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test"))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}

	res, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if len(res.Choices) != 1 || res.Choices[0].FinishReason != "stop" || !strings.HasPrefix(res.Choices[0].Message.Content, TerminatePrefix) ||
		len(res.Choices[0].Message.ToolCalls) != 0 || res.Model != "gpt-4.1" {
		t.Errorf("New = %+v", res)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("accumulator rejected chunk %s", stream.Current().RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(acc.Choices) != 1 || !strings.HasPrefix(acc.Choices[0].Message.Content, TerminatePrefix) ||
		acc.Choices[0].FinishReason != "stop" || len(acc.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("accumulated %+v", acc.ChatCompletion)
	}
	if !acc.JSON.Usage.Valid() && acc.Usage.TotalTokens != 0 {
		t.Errorf("usage = %+v", acc.Usage)
	}
}

func TestTerminateErrorNotRetried(t *testing.T) {
	srv, n := sdkServer(t, stableInjector(t, Config{TerminateAs: AsError}))
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("test"), option.WithMaxRetries(3))
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-4.1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("New error = %v; want an *openai.Error", err)
	}
	if apiErr.StatusCode != DefaultErrorStatus || apiErr.Type != LoopErrorType || apiErr.Code != LoopErrorCode {
		t.Errorf("error = %d %q %q; want %d %q %q", apiErr.StatusCode, apiErr.Type, apiErr.Code, DefaultErrorStatus, LoopErrorType, LoopErrorCode)
	}
	if got := n.Load(); got != 1 {
		t.Errorf("the SDK sent %d requests; want 1 (no retry)", got)
	}

	cfg := goopenai.DefaultConfig("test")
	cfg.BaseURL = srv.URL + "/v1"
	_, err = goopenai.NewClientWithConfig(cfg).CreateChatCompletion(context.Background(),
		goopenai.ChatCompletionRequest{Model: "gpt-4.1", Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "hi"}}})
	var goErr *goopenai.APIError
	if !errors.As(err, &goErr) || goErr.HTTPStatusCode != DefaultErrorStatus || goErr.Type != LoopErrorType || goErr.Code != LoopErrorCode {
		t.Errorf("go-openai error = %#v", err)
	}
}

func TestErrorBody(t *testing.T) {
	tests := []struct {
		msg, typ, code string
		want           string
	}{
		{"request body too large", "invalid_request_error", "", `{"error":{"message":"request body too large","type":"invalid_request_error","param":null,"code":null}}`},
		{"upstream \"x\" timed out", "upstream_error", "timeout", `{"error":{"message":"upstream \"x\" timed out","type":"upstream_error","param":null,"code":"timeout"}}`},
	}
	for _, tt := range tests {
		if got := string(ErrorBody(tt.msg, tt.typ, tt.code)); got != tt.want {
			t.Errorf("ErrorBody(%q, %q, %q) = %s; want %s", tt.msg, tt.typ, tt.code, got, tt.want)
		}
	}
}

func TestNewIDFallsBackToClock(t *testing.T) {
	in := stableInjector(t, Config{})
	in.random = strings.NewReader("")
	if id := in.newID(); !strings.HasPrefix(id, idPrefix) || len(id) <= len(idPrefix) {
		t.Errorf("newID() = %q", id)
	}
}
