package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/tidwall/gjson"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/proxy"
)

// maxTurns bounds a tool scenario, so a change in the ladder or the
// detectors ends the demo with an error instead of looping for ever.
const maxTurns = 20

// ErrNoEnding is returned by Run when a scenario did not end the way the
// demo tells it: loopguard's configuration or detectors changed.
var ErrNoEnding = errors.New("demo: scenario did not reach its ending")

// Run plays the demo's scenarios through a fresh proxy on loopback and
// writes the transcript to out. It returns once every scenario has ended
// and the proxy and the scripted model have shut down.
func Run(ctx context.Context, out io.Writer, opts Options) (err error) {
	events := make(chan event, 64)
	e, err := start(nil, opts, func(ev event) {
		// The hook must not block the request path; the demo is
		// sequential and reads one event per request, so a full buffer
		// would mean a bug, and dropping is then better than a stall.
		select {
		case events <- ev:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, e.close()) }()

	d := &demo{env: e, events: events, p: &printer{w: out, color: opts.Color}}
	d.intro()
	steps := []func(context.Context) error{d.stubborn, d.listener, d.rambler}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	d.outro()
	return d.p.err
}

// demo is one run of the scenarios.
type demo struct {
	*env
	events chan event
	p      *printer
}

func (d *demo) intro() {
	d.p.printf("%s\n", d.p.paint(sgrBold, "loopguard demo"))
	d.p.para("A scripted model (no LLM) and scripted agents talk through the real loopguard proxy at " +
		d.proxyURL + ", with its default configuration. Each agent is a real OpenAI client that resends its " +
		"whole history every turn and runs its own tool calls (their results are canned).")
}

func (d *demo) outro() {
	d.p.printf("\n")
	d.p.para("Try it with your own client: `loopguard demo -serve`, then point it at " +
		"OPENAI_BASE_URL=http://127.0.0.1:8787/v1 (any API key).")
}

// stubborn is scenario 1: the model ignores every notice.
func (d *demo) stubborn(ctx context.Context) error {
	d.p.heading("Scenario 1: the stubborn agent")
	d.p.para("Task: \"" + task + "\" The model calls `make build` every turn, and `make build` always fails with " +
		"the same error. loopguard escalates: warn, then constrain (a <loop-recovery> block and a collapsed " +
		"history), then terminate (it answers LOOP_DETECTED itself).")
	a := newAgent(d.proxyURL, d.client, ModelStubborn, "demo-stubborn-agent")
	evs, err := d.toolLoop(ctx, a)
	if err != nil {
		return err
	}
	if last := evs[len(evs)-1]; last.Action != policy.Terminate {
		return fmt.Errorf("%w: stubborn agent ended with action %s", ErrNoEnding, evs[len(evs)-1].Action)
	}
	d.p.line("result", sgrBold, "the agent got LOOP_DETECTED instead of another tool call and stopped: "+
		"no more tokens burnt on `make build`.")
	return nil
}

// listener is scenario 2: the model changes approach after the warning.
func (d *demo) listener(ctx context.Context) error {
	d.p.heading("Scenario 2: the agent that listens")
	d.p.para("Same task, same failing build; this model reads loopguard's warning, looks at the Makefile, " +
		"runs the right target and finishes.")
	a := newAgent(d.proxyURL, d.client, ModelListener, "demo-listening-agent")
	evs, err := d.toolLoop(ctx, a)
	if err != nil {
		return err
	}
	if last := evs[len(evs)-1]; last.Terminated || last.Action == policy.Terminate {
		return fmt.Errorf("%w: listening agent was terminated", ErrNoEnding)
	}
	if later := actedAfterWarning(evs); later > 0 {
		d.p.line("result", sgrBold, fmt.Sprintf("the agent changed approach after the warning and finished, "+
			"though loopguard still acted on %d later turn(s).", later))
		return nil
	}
	d.p.line("result", sgrBold, "the agent changed approach after one warning and finished normally; "+
		"loopguard let every later turn through untouched.")
	return nil
}

// actedAfterWarning counts the turns after the first warning on which
// loopguard did anything but pass the request through.
func actedAfterWarning(evs []event) int {
	n, warned := 0, false
	for _, ev := range evs {
		switch {
		case !warned:
			warned = ev.Action == policy.Warn
		case ev.Action != policy.None || ev.Constraints > 0:
			n++
		}
	}
	return n
}

// toolLoop runs turns until the model answers without tool calls, and
// returns every turn's event.
func (d *demo) toolLoop(ctx context.Context, a *agent) ([]event, error) {
	var evs []event
	for turn := 1; turn <= maxTurns; turn++ {
		ev, done, err := d.turn(ctx, a, turn)
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
		if done {
			return evs, nil
		}
	}
	return nil, fmt.Errorf("%w: still calling tools after %d turns", ErrNoEnding, maxTurns)
}

// turn plays one request of a tool-using agent and prints it.
func (d *demo) turn(ctx context.Context, a *agent, n int) (event, bool, error) {
	sent := len(a.messages)
	before := d.upstreamCount()
	rep, err := a.ask(ctx)
	if err != nil {
		return event{}, false, err
	}
	ev, err := d.wait(ctx)
	if err != nil {
		return event{}, false, err
	}

	d.p.printf("\n%s %s\n", d.p.paint(sgrBold, fmt.Sprintf("turn %d", n)),
		d.p.paint(sgrDim, fmt.Sprintf("- the agent sends its history: %d messages", sent)))
	d.action(ev, rep)
	if body, ok := d.upstreamRequest(before); ok {
		d.modelSaw(body, sent)
	} else {
		d.p.line("model", sgrDim, "not called: loopguard answered instead.")
	}

	msg := rep.message
	if len(msg.ToolCalls) == 0 {
		d.p.line("answer", sgrBold, fmt.Sprintf("finish_reason %s, no tool calls:", rep.finish))
		d.p.block(msg.Content, 8)
		return ev, true, nil
	}
	for _, c := range msg.ToolCalls {
		say := ""
		if msg.Content != "" {
			say = "\"" + msg.Content + "\" "
		}
		d.p.line("model", "", say+"-> "+c.Function.Name+" "+c.Function.Arguments)
		out, exit := runTool(c.Function.Name, c.Function.Arguments)
		a.answer(c.ID, toolContent(out, exit))
		color := sgrGreen
		if exit != 0 {
			color = sgrRed
		}
		d.p.line("tool", "", d.p.paint(color, fmt.Sprintf("exit %d:", exit))+" "+shorten(oneLine(out), 70))
	}
	return ev, false, nil
}

// action prints what loopguard did with one request and why.
func (d *demo) action(ev event, rep reply) {
	hdr := fmt.Sprintf("X-Loopguard-Action: %s", rep.header.Get(proxy.HeaderAction))
	if l := rep.header.Get(proxy.HeaderLoop); l != "" {
		hdr += ", X-Loopguard-Loop: " + l
	}
	var what string
	switch ev.Action {
	case policy.None:
		what = d.p.paint(sgrGreen, "none")
		if ev.Constraints > 0 {
			what += fmt.Sprintf(", %d active constraint(s) re-injected", ev.Constraints)
		}
		if ev.ReportedCut {
			what += ", tells the model its last answer was cut"
		}
	case policy.Warn:
		what = d.p.paint(sgrBold+";"+sgrYellow, "WARN")
	case policy.Constrain, policy.Reset:
		what = d.p.paint(sgrBold+";"+sgrMagenta, strings.ToUpper(string(ev.Action)))
		if ev.Collapse {
			what += " + history collapsed"
		}
	case policy.Terminate:
		what = d.p.paint(sgrBold+";"+sgrRed, "TERMINATE")
	default:
		what = string(ev.Action)
	}
	if ev.FailOpen != "" {
		what += " (failed open at " + ev.FailOpen + ")"
	}
	if ev.Action == policy.None {
		d.p.line("loopguard", sgrCyan, what+" "+d.p.paint(sgrDim, "("+hdr+")"))
		return
	}
	d.p.line("loopguard", sgrCyan, what)
	if ev.Summary != "" {
		d.p.line("why", sgrDim, ev.Summary)
	}
	d.p.line("headers", sgrDim, d.p.paint(sgrDim, hdr))
}

// modelSaw prints what loopguard changed in the request the model got:
// injected notices and a shorter history.
func (d *demo) modelSaw(body []byte, sent int) {
	msgs := gjson.GetBytes(body, "messages").Array()
	if len(msgs) != sent {
		d.p.line("model saw", sgrCyan, fmt.Sprintf("%d messages instead of %d: the repeated calls were "+
			"collapsed into one", len(msgs), sent))
	}
	for _, m := range msgs {
		content := m.Get("content").String()
		at := noticeAt(content)
		if at < 0 {
			continue
		}
		notice := content[at:]
		where := map[string]string{
			"tool":   "appended to the last tool result",
			"user":   "as a user message",
			"system": "merged into the system message",
		}[m.Get("role").String()]
		if strings.HasPrefix(notice, inject.RecoveryTag) {
			d.p.line("model saw", sgrCyan, "a <loop-recovery> block, "+where+" (shortened):")
			d.p.block(notice, 9)
			continue
		}
		if strings.Contains(notice, inject.RecoveryTag) {
			// A collapse note and a block in one message: show each.
			d.p.line("model saw", sgrCyan, "a note, "+where+":")
			i := strings.Index(notice, inject.RecoveryTag)
			d.p.block(strings.TrimSpace(notice[:i]), 3)
			d.p.line("model saw", sgrCyan, "a <loop-recovery> block (shortened):")
			d.p.block(notice[i:], 9)
			continue
		}
		d.p.line("model saw", sgrCyan, "a notice, "+where+":")
		d.p.block(notice, 0)
	}
}

// noticeAt is the byte offset of the first loopguard text in content, -1
// if there is none.
func noticeAt(content string) int {
	at := -1
	for _, mark := range []string{inject.Marker, inject.RecoveryTag} {
		if i := strings.Index(content, mark); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	return at
}

// rambler is scenario 3: a streamed answer degenerates and is cut.
func (d *demo) rambler(ctx context.Context) error {
	d.p.heading("Scenario 3: a degenerate stream")
	d.p.para("The model streams an answer that falls into repeating one sentence. loopguard watches the " +
		"stream as it passes, cuts it, and tells the model on the next request.")
	a := newAgent(d.proxyURL, d.client, ModelRambler, "demo-rambling-agent")
	a.messages = a.messages[:0]
	a.messages = append(a.messages, openai.ChatCompletionMessage{
		Role: openai.ChatMessageRoleUser, Content: "Is the config file still unchanged?",
	})
	rep, err := a.stream(ctx)
	if err != nil {
		return err
	}
	ev, err := d.wait(ctx)
	if err != nil {
		return err
	}
	d.p.printf("\n%s %s\n", d.p.paint(sgrBold, "turn 1"), d.p.paint(sgrDim, "- streamed"))
	if ev.Cut == "" {
		return fmt.Errorf("%w: the degenerate stream was not cut", ErrNoEnding)
	}
	full := len(ramblerAnswer())
	d.p.line("loopguard", sgrCyan, d.p.paint(sgrBold+";"+sgrMagenta, "STREAM CUT"))
	d.p.line("why", sgrDim, fmt.Sprintf("stream cut: %s at byte %d of the answer's text; about %d of the "+
		"request's max_tokens saved", ev.Cut, ev.CutOffset, ev.TokensSaved))
	d.p.line("client", "", fmt.Sprintf("finish_reason %s after %d of the %d bytes the model was streaming:",
		rep.finish, len(rep.message.Content), full))
	d.p.block(shorten(rep.message.Content, 160), 0)

	a.messages = append(a.messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "Well?"})
	before := d.upstreamCount()
	rep, err = a.stream(ctx)
	if err != nil {
		return err
	}
	if ev, err = d.wait(ctx); err != nil {
		return err
	}
	d.p.printf("\n%s %s\n", d.p.paint(sgrBold, "turn 2"), d.p.paint(sgrDim, "- streamed"))
	d.action(ev, rep)
	if body, ok := d.upstreamRequest(before); ok {
		d.modelSaw(body, len(a.messages)-1)
	}
	d.p.line("answer", sgrBold, fmt.Sprintf("finish_reason %s:", rep.finish))
	d.p.block(rep.message.Content, 0)
	if ev.Cut != "" {
		return fmt.Errorf("%w: the answer after the notice was cut too", ErrNoEnding)
	}
	return nil
}

// wait returns the proxy's event for the request just answered.
func (d *demo) wait(ctx context.Context) (event, error) {
	t := time.NewTimer(eventWait)
	defer t.Stop()
	select {
	case ev := <-d.events:
		return ev, nil
	case <-t.C:
		return event{}, errors.New("demo: the proxy reported no chat event")
	case <-ctx.Done():
		return event{}, ctx.Err()
	}
}
