package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/loopguard/loopguard/policy"
)

// Serve runs the scripted model with the proxy in front of it on ln until
// ctx ends, then shuts both down, letting running answers finish. It prints
// how to point a client at the proxy, then one line per chat request: the
// session, the action and the loop, never the request's content. Serve owns
// ln and closes it.
func Serve(ctx context.Context, ln net.Listener, out io.Writer, opts Options) error {
	p := &printer{w: out, color: opts.Color}
	// The hook runs on the proxy's request goroutines, concurrently.
	var mu sync.Mutex
	e, err := start(ln, opts, func(ev event) {
		mu.Lock()
		defer mu.Unlock()
		p.eventLine(ev)
	})
	if err != nil {
		_ = ln.Close()
		return err
	}
	// Nobody reads the recordings here; recording would grow without bound.
	e.fake.SetRecording(false)

	mu.Lock()
	p.banner("http://" + ln.Addr().String())
	mu.Unlock()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-e.srvDone:
		// The listener failed: close still waits for srvDone.
		e.srvDone <- serveErr
	}
	if err := e.close(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return serveErr
}

// banner tells how to use the proxy that Serve runs at base.
func (p *printer) banner(base string) {
	p.printf("%s %s\n", p.paint(sgrBold, "loopguard demo -serve:"),
		"the proxy at "+base+" fronts a scripted model (no LLM, nothing leaves this machine).")
	p.printf("\nPoint any OpenAI-compatible client at it (any API key works):\n\n")
	p.printf("    export OPENAI_BASE_URL=%s/v1\n    export OPENAI_API_KEY=demo\n\n", base)
	p.printf("Models (the \"model\" field):\n")
	p.printf("    %-14s calls a tool you offer with the same arguments every turn, until loopguard ends it\n", ModelStubborn)
	p.printf("    %-14s offered a `bash` tool, runs `make build` and changes approach after a warning\n", ModelListener)
	p.printf("    %-14s with \"stream\": true, degenerates into repetition and gets cut\n", ModelRambler)
	p.printf("    %-14s anything else: calls the first offered tool once, then answers in text\n", "(other)")
	p.printf("\nSend a fixed session with the header X-Session-ID. For example:\n\n")
	p.printf("    curl -sN %s/v1/chat/completions -H 'Content-Type: application/json' \\\n"+
		"      -H 'X-Session-ID: try-1' -d '{\"model\":\"%s\",\"stream\":true,"+
		"\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n\n", base, ModelRambler)
	p.printf("Each chat request prints one line below. Ctrl-C stops.\n\n")
}

// eventLine prints one chat request in Serve mode. It names no content: the
// requests come from the user's own client.
func (p *printer) eventLine(ev event) {
	action := string(ev.Action)
	switch ev.Action {
	case policy.Warn:
		action = p.paint(sgrYellow, action)
	case policy.Constrain, policy.Reset:
		action = p.paint(sgrMagenta, action)
	case policy.Terminate:
		action = p.paint(sgrRed, action)
	}
	line := fmt.Sprintf("session=%s action=%s", ev.Session, action)
	if ev.Category != "" {
		line += fmt.Sprintf(" loop=%s confidence=%.2f", ev.Category, ev.Confidence)
	}
	if ev.Constraints > 0 {
		line += fmt.Sprintf(" constraints=%d", ev.Constraints)
	}
	if ev.Collapse {
		line += " collapsed=true"
	}
	if ev.Cut != "" {
		line += fmt.Sprintf(" cut=%s at_byte=%d", ev.Cut, ev.CutOffset)
	}
	if ev.FailOpen != "" {
		line += " fail_open=" + ev.FailOpen
	}
	p.printf("%s %s\n", p.paint(sgrCyan, "chat"), line)
}
