package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/loopguard/loopguard/fakellm"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/observe"
	"github.com/loopguard/loopguard/policy"
)

// loopSession is the session key the looping agent sends.
const loopSession = "e2e-dashboard-loop"

// loopingHistory is a chat request whose history shows the same failing
// tool call n times: the agent runs `npm test`, gets the same error, and
// runs it again.
func loopingHistory(n int, cmd, result string) string {
	var b strings.Builder
	b.WriteString(`{"model":"fake-model","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Make the tests pass."}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"bash","arguments":%q}}]}`,
			i, fmt.Sprintf(`{"command":%q}`, cmd))
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":%q}`, i, result)
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}]}`)
	return b.String()
}

const npmError = "Error: Cannot find module 'left-pad'\nRequire stack:\n- /app/test/index.test.js\nexit status 1"

// browser starts headless Chromium and returns a chromedp context, or skips
// the test when Chromium is absent and LOOPGUARD_REQUIRE_BROWSER is unset.
func browser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Chromium: skipped under -short")
	}
	path := os.Getenv("LOOPGUARD_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		if os.Getenv("LOOPGUARD_REQUIRE_BROWSER") != "" {
			t.Fatal("LOOPGUARD_REQUIRE_BROWSER is set but no chromium was found (apt-get install -y chromium)")
		}
		t.Skip("chromium not installed; set LOOPGUARD_REQUIRE_BROWSER=1 to make this a failure")
	}
	// Not t.TempDir: Chromium's helper processes can still be writing to
	// the profile for a moment after the browser is gone, and TempDir's
	// cleanup fails the test on a directory it cannot empty.
	profile, err := os.MkdirTemp("", "loopguard-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1500, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser()
		cancelAlloc()
		for range 20 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("could not remove the Chromium profile %s", profile)
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// checkDashboard opens the dashboard at url, waits for the looping session
// and its interventions, and saves a screenshot under dir. It returns the
// screenshot's path.
func checkDashboard(t *testing.T, ctx context.Context, url, dir string) string {
	t.Helper()
	row := fmt.Sprintf(`#sessions tr[data-session=%q]`, loopSession)
	var state, timeline string
	err := chromedp.Run(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		chromedp.Text(row+` td:nth-child(3)`, &state, chromedp.ByQuery),
		chromedp.Click(row, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline li [data-action="warn"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#timeline li [data-action="constrain"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live.on`, chromedp.ByQuery),
		chromedp.Text(`#timeline`, &timeline, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("dashboard at %s: %v", url, err)
	}
	if state != observe.StateTerminated {
		t.Errorf("session state in the list = %q; want %q", state, observe.StateTerminated)
	}
	for _, want := range []string{"bash()", "tool_repetition", "warn L0", "constrain L1", "terminate L2", "looped again"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("timeline lacks %q:\n%s", want, timeline)
		}
	}
	if strings.Contains(timeline, "left-pad") {
		t.Errorf("timeline shows tool result content:\n%s", timeline)
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.Sleep(300*time.Millisecond), chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s (%d bytes)", path, len(png))
	return path
}

// TestDashboardThroughProxy drives a looping agent through the real proxy in
// front of the scripted upstream and checks, in headless Chromium, that the
// dashboard at /loopguard/ shows the session and its interventions.
func TestDashboardThroughProxy(t *testing.T) {
	fake := fakellm.Start(t, fakellm.Script{Loop: true, Responses: []fakellm.Response{{
		ToolCalls: []fakellm.ToolCall{{Name: "bash", Arguments: `{"command":"npm test"}`}},
	}}})
	base := startProxy(t, fake.URL())

	ctx := browser(t)
	for n := 3; n <= 6; n++ {
		req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(loopingHistory(n, "npm test", npmError)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", loopSession)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request with %d repetitions: %v", n, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		t.Logf("%d repetitions: %s %s", n, res.Header.Get("X-Loopguard-Action"), res.Header.Get("X-Loopguard-Loop"))
	}
	checkDashboard(t, ctx, base+"/loopguard/", t.TempDir())
}

// TestDashboardInBrowser checks the dashboard itself in headless Chromium,
// fed by the real detectors and policy (the proxy's own steps, without the
// proxy): a looping agent walks the whole ladder, another recovers after a
// warning, a third has an answer cut, a fourth is healthy. With
// LOOPGUARD_UPDATE_SCREENSHOT=1 it refreshes docs/dashboard.png.
func TestDashboardInBrowser(t *testing.T) {
	obs, err := observe.New(nil, zerolog.Nop(), observe.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.New(policy.DefaultConfig(), nil, zerolog.Nop())
	engine, err := inspect.NewEngine(inspect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := observe.NewAdmin(obs.Recorder(), observe.AdminOptions{
		Control: pol, States: pol.Store(), Config: map[string]any{"admin": map[string]string{"token": ""}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	ctx := browser(t) // cleaned up before the server: the live feed ends first

	decide := func(key, body string) {
		t.Helper()
		traj, err := engine.Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		v := engine.Inspect(traj)
		d, err := pol.Decide(context.Background(), key, v, traj, policy.ModeEnforce)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		info := observe.RequestInfo{Session: key, Model: traj.Model, Steps: len(traj.Steps), Decision: &d}
		if n := len(traj.Steps); n > 0 {
			if calls := traj.Steps[n-1].Calls; len(calls) > 0 {
				info.Tool, info.Fingerprint = calls[len(calls)-1].Name, calls[len(calls)-1].Fingerprint
			}
		}
		obs.Request(info)
	}
	// A healthy agent reading different files.
	healthy := `{"model":"llama-3.1-70b","messages":[{"role":"user","content":"Summarise the repo."}`
	for i := range 4 {
		healthy += fmt.Sprintf(`,{"role":"assistant","content":null,"tool_calls":[{"id":"r%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/f%d.go\"}"}}]},{"role":"tool","tool_call_id":"r%d","content":"package f%d"}`, i, i, i, i)
		decide("agent-healthy", healthy+`]}`)
	}
	// An agent that recovers after a warning: the same grep three times,
	// then something new.
	for n := 3; n <= 4; n++ {
		decide("agent-recovers", loopingHistory(n, "grep -rn TODO src", "no matches"))
	}
	rec := strings.TrimSuffix(loopingHistory(4, "grep -rn TODO src", "no matches"), `],"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}]}`) +
		`,{"role":"assistant","content":null,"tool_calls":[{"id":"x1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"README.md\"}"}}]},{"role":"tool","tool_call_id":"x1","content":"# project"}]}`
	decide("agent-recovers", rec)
	// An agent whose answer degenerated and was cut.
	decide("agent-cut", loopingHistory(1, "ls", "a b c"))
	obs.Response(observe.ResponseInfo{Session: "agent-cut", Path: "/v1/chat/completions", Status: 200, Streamed: true,
		Cut: policy.Cut{Category: inspect.TokenDegeneration, Offset: 1840, TokensSaved: 3500}})
	// The looping agent walks the ladder: warn, constrain, terminate.
	for n := 3; n <= 6; n++ {
		decide(loopSession, loopingHistory(n, "npm test", npmError))
	}

	// The judge's checks of the looping session: one that failed open, one
	// stuck verdict with what it saw repeating.
	obs.Judge(observe.JudgeInfo{Session: loopSession, Step: 3, Outcome: "timeout", Latency: 20 * time.Second})
	obs.Judge(observe.JudgeInfo{Session: loopSession, Step: 5, Outcome: "stuck", Stuck: true, Confidence: 0.85,
		Latency: 400 * time.Millisecond, What: "rerunning the tests without fixing the missing module"})

	dir := t.TempDir()
	path := checkDashboard(t, ctx, "http://"+ln.Addr().String()+"/loopguard/", dir)

	// The judge's entries render as the judge's, not as an operator's.
	var judged string
	if err := chromedp.Run(ctx, chromedp.Text(`#timeline`, &judged, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"judge timeout", "judge stuck", "step 6", "semantic_loop 85%", "without fixing the missing module"} {
		if !strings.Contains(judged, want) {
			t.Errorf("timeline lacks the judge's %q:\n%s", want, judged)
		}
	}
	var stuckKind string
	if err := chromedp.Run(ctx, chromedp.AttributeValue(`#timeline li [data-outcome="stuck"]`, "class", &stuckKind, nil, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stuckKind, "j-stuck") {
		t.Errorf("stuck verdict badge class %q; want j-stuck", stuckKind)
	}

	// The charts and the recovery panel have data too.
	var recovery string
	if err := chromedp.Run(ctx, chromedp.Text(`#recovery`, &recovery, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(recovery, "tool_repetition L0") {
		t.Errorf("recovery panel = %q; want a tool_repetition L0 row", recovery)
	}
	if os.Getenv("LOOPGUARD_UPDATE_SCREENSHOT") != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
