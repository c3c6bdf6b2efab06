package demo

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/loopguard/loopguard/proxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's worker-pool cleaner and the client's idle-conn cleaner
		// notice a stopped server or an idle pool only at their next tick
		// (seconds later); they exit on their own and hold no connection.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

// runLimit bounds a whole demo run in tests; it takes well under a second.
const runLimit = 20 * time.Second

// runDemo runs the demo and returns its transcript.
func runDemo(t *testing.T, opts Options) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	if err := Run(ctx, &out, opts); err != nil {
		t.Fatalf("Run: %v\ntranscript:\n%s", err, out.String())
	}
	if d := time.Since(start); d > runLimit {
		t.Errorf("Run took %v; want < %v", d, runLimit)
	}
	return out.String()
}

// scenario returns the transcript's section whose heading contains title.
func scenario(t *testing.T, transcript, title string) string {
	t.Helper()
	i := strings.Index(transcript, title)
	if i < 0 {
		t.Fatalf("transcript has no %q section:\n%s", title, transcript)
	}
	s := transcript[i:]
	if j := strings.Index(s[len(title):], "\n== "); j >= 0 {
		s = s[:len(title)+j]
	}
	return s
}

// wrapMark is the transcript's continuation of a wrapped line: a newline,
// the indent and, inside quoted blocks, the "| " gutter.
var wrapMark = regexp.MustCompile(`\n {14}(\| )?`)

// flat undoes the transcript's wrapping and spacing, so that a check does
// not depend on where a long text wrapped.
func flat(s string) string {
	return strings.Join(strings.Fields(wrapMark.ReplaceAllString(s, " ")), " ")
}

// inOrder reports whether each of wants occurs in s after the previous one,
// wherever lines wrapped.
func inOrder(s string, wants ...string) (missing string, ok bool) {
	s = flat(s)
	for _, w := range wants {
		i := strings.Index(s, flat(w))
		if i < 0 {
			return w, false
		}
		s = s[i+len(w):]
	}
	return "", true
}

// actionLine matches the transcript's line for an intervention.
var actionLine = regexp.MustCompile(`(?m)^ +loopguard +(WARN|CONSTRAIN|RESET|TERMINATE)`)

func TestRunStubbornAgentEscalatesToTermination(t *testing.T) {
	s := scenario(t, runDemo(t, Options{}), "Scenario 1")
	if w, ok := inOrder(s,
		"loopguard none",
		"loopguard WARN", "X-Loopguard-Action: warn", "[loopguard] Possible loop",
		"loopguard CONSTRAIN", "X-Loopguard-Action: constrain", "<loop-recovery",
		"loopguard TERMINATE", "X-Loopguard-Action: terminate", "not called", "LOOP_DETECTED:",
		"the agent got LOOP_DETECTED",
	); !ok {
		t.Errorf("scenario 1 lacks %q in order:\n%s", w, s)
	}
	if got := strings.Count(s, "loopguard  TERMINATE"); got != 1 {
		t.Errorf("scenario 1 terminates %d times; want 1:\n%s", got, s)
	}
	// Constrain collapses the repeated calls (reset_on_constrain).
	if !strings.Contains(flat(s), "collapsed into one") {
		t.Errorf("scenario 1 shows no collapsed history:\n%s", s)
	}
}

func TestRunListeningAgentFinishes(t *testing.T) {
	s := scenario(t, runDemo(t, Options{}), "Scenario 2")
	if w, ok := inOrder(s,
		"loopguard WARN", "[loopguard] Possible loop",
		`-> bash {"command":"cat Makefile"}`,
		`-> bash {"command":"make all"}`,
		"finish_reason stop, no tool calls", finalAnswer,
	); !ok {
		t.Errorf("scenario 2 lacks %q in order:\n%s", w, s)
	}
	if strings.Contains(s, "LOOP_DETECTED") || strings.Contains(s, "TERMINATE") {
		t.Errorf("scenario 2 was terminated:\n%s", s)
	}
}

// TestRunListeningAgentNoActionAfterWarning is the promise: once
// the agent has changed approach, loopguard passes every request through.
func TestRunListeningAgentNoActionAfterWarning(t *testing.T) {
	s := scenario(t, runDemo(t, Options{}), "Scenario 2")
	acts := actionLine.FindAllStringIndex(s, -1)
	if len(acts) != 1 {
		t.Errorf("scenario 2 has %d interventions; want exactly 1 (the warning):\n%s", len(acts), s)
	}
	if !strings.Contains(flat(s), "loopguard let every later turn through untouched") {
		t.Errorf("scenario 2 does not end untouched:\n%s", s)
	}
}

func TestRunCutsDegenerateStream(t *testing.T) {
	s := scenario(t, runDemo(t, Options{}), "Scenario 3")
	offset := len(ramblerStart)
	if w, ok := inOrder(s,
		"STREAM CUT",
		"stream cut: token_degeneration at byte "+strconv.Itoa(offset),
		"finish_reason stop after",
		"tells the model its last answer was cut",
		"[loopguard] Your previous answer degenerated",
		ramblerRecovered,
	); !ok {
		t.Errorf("scenario 3 lacks %q in order:\n%s", w, s)
	}
}

// TestRunDeterministic: two runs print the same transcript but for the
// proxy's port.
func TestRunDeterministic(t *testing.T) {
	port := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	a := port.ReplaceAllString(runDemo(t, Options{}), "ADDR")
	b := port.ReplaceAllString(runDemo(t, Options{}), "ADDR")
	if a != b {
		t.Errorf("transcripts differ:\n--- first\n%s\n--- second\n%s", a, b)
	}
}

func TestRunColor(t *testing.T) {
	tests := []struct {
		name string
		give bool
		want bool
	}{
		{"plain", false, false},
		{"color", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Contains(runDemo(t, Options{Color: tt.give}), "\x1b[")
			if got != tt.want {
				t.Errorf("Run(Color: %v) has escapes = %v; want %v", tt.give, got, tt.want)
			}
		})
	}
}

func TestRunLogs(t *testing.T) {
	var logs bytes.Buffer
	runDemo(t, Options{Log: &logs})
	// The proxy logs each loop once at info; the demo has three.
	if !strings.Contains(logs.String(), "tool_repetition") {
		t.Errorf("proxy logs lack the loop:\n%s", logs.String())
	}
}

func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	if err := Run(ctx, &out, Options{}); err == nil {
		t.Errorf("Run(canceled) = nil; want an error")
	}
}

func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, &out, Options{}) }()

	base := "http://" + ln.Addr().String() + "/v1"
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cfg := openai.DefaultConfig("any-key")
	cfg.BaseURL = base
	cfg.HTTPClient = sessionDoer{client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, session: "serve-test"}
	client := openai.NewClientWithConfig(cfg)
	resp, err := client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hello"}},
	})
	if err != nil {
		t.Fatalf("CreateChatCompletion through Serve: %v", err)
	}
	if len(resp.Choices) != 1 || !strings.Contains(resp.Choices[0].Message.Content, "scripted demo model") {
		t.Errorf("answer = %+v; want the scripted model's greeting", resp.Choices)
	}
	if got := resp.Header().Get(proxy.HeaderSession); got != "serve-test" {
		t.Errorf("%s = %q; want serve-test", proxy.HeaderSession, got)
	}
	if got := resp.Header().Get(proxy.HeaderAction); got != "none" {
		t.Errorf("%s = %q; want none", proxy.HeaderAction, got)
	}
	tr.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v; want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	got := out.String()
	for _, want := range []string{"OPENAI_BASE_URL=" + base, "chat session=serve-test action=none"} {
		if !strings.Contains(got, want) {
			t.Errorf("Serve output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "hello") {
		t.Errorf("Serve printed request content:\n%s", got)
	}
}

// syncBuffer is a bytes.Buffer that Serve's hook and the test may use at
// once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
