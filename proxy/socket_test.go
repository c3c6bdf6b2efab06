package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/loopguard/loopguard/inspect"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
)

// socketUpstream is a fake Responses WebSocket server: script returns the
// events it answers the n-th response.create with (n from 1); it records
// what it got and what it sent.
type socketUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	got      []string
	sent     []string
	header   http.Header
	closedAt time.Time // when the proxy's socket to it closed
	conn     *websocket.Conn
	closed   chan struct{}
}

func startSocketUpstream(t testing.TB, script func(n int, req string, send func(string) error)) *socketUpstream {
	t.Helper()
	su := &socketUpstream{closed: make(chan struct{}, 16)}
	u := websocket.Upgrader{Subprotocols: []string{"v2"}}
	su.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Refuse") != "" {
			w.WriteHeader(http.StatusUpgradeRequired)
			io.WriteString(w, `{"error":{"message":"use HTTP"}}`)
			return
		}
		c, err := u.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		su.mu.Lock()
		su.header = r.Header.Clone()
		su.conn = c
		su.mu.Unlock()
		n := 0
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				su.mu.Lock()
				su.closedAt = time.Now()
				su.mu.Unlock()
				su.closed <- struct{}{}
				return
			}
			su.mu.Lock()
			su.got = append(su.got, string(msg))
			su.mu.Unlock()
			if gjson.GetBytes(msg, "type").String() != "response.create" {
				continue
			}
			n++
			// A script that streams slowly runs beside the reader, so that
			// a close is seen while it sends.
			go script(n, string(msg), func(ev string) error {
				su.mu.Lock()
				defer su.mu.Unlock()
				su.sent = append(su.sent, ev)
				return c.WriteMessage(websocket.TextMessage, []byte(ev))
			})
		}
	}))
	t.Cleanup(su.Close)
	return su
}

func (su *socketUpstream) snapshot() (got, sent []string) {
	su.mu.Lock()
	defer su.mu.Unlock()
	return append([]string(nil), su.got...), append([]string(nil), su.sent...)
}

// checkSocketLeaks fails t if a goroutine started during it outlives it
// (the proxy's cleanup included), beside fasthttp's own that TestMain
// ignores too.
func checkSocketLeaks(t *testing.T) {
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// startSocketProxy serves a proxy for up with opts; events are the chat
// events of its turns.
func startSocketProxy(t testing.TB, up string, mutate func(*Config)) (base string, events func() []ChatEvent) {
	t.Helper()
	var mu sync.Mutex
	var evs []ChatEvent
	_, url := startProxyWith(t, func(c *Config) {
		c.Upstream.URL = up
		if mutate != nil {
			mutate(c)
		}
	}, WithChatDone(func(e *ChatEvent) {
		mu.Lock()
		evs = append(evs, *e)
		mu.Unlock()
	}))
	return strings.TrimPrefix(url, "http://"), func() []ChatEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]ChatEvent(nil), evs...)
	}
}

// waitChatEvents waits until events holds n chat events and returns them
// in the order their requests arrived (ChatEvent.Start): a request's event
// is reported when its answer has ended, so a streamed answer's may come
// after the next request's.
func waitChatEvents(t *testing.T, events func() []ChatEvent, n int) []ChatEvent {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	evs := events()
	for ; len(evs) < n; evs = events() {
		if time.Now().After(deadline) {
			t.Fatalf("%d chat events reported 10 s after the last turn; want %d", len(evs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	slices.SortStableFunc(evs, func(a, b ChatEvent) int { return a.Start.Compare(b.Start) })
	return evs
}

func dialSocket(t *testing.T, addr, path string, h http.Header) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"v2"}, EnableCompression: true}
	c, resp, err := d.Dial("ws://"+addr+path, h)
	if err != nil {
		t.Fatalf("Dial: %v (response %v)", err, resp)
	}
	return c
}

// readTurn reads the messages of one response, up to its terminal event.
func readTurn(t *testing.T, c *websocket.Conn) []string {
	t.Helper()
	var out []string
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read after %d messages: %v", len(out), err)
		}
		out = append(out, string(msg))
		if terminalEvent(gjson.GetBytes(msg, "type").String()) {
			return out
		}
	}
}

// textTurn is a healthy answer: a message whose text is new each turn.
func textTurn(n int, _ string, send func(string) error) {
	id := fmt.Sprintf("resp_%d", n)
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"}
	text := fmt.Sprintf("%s %s %s %d", words[n%12], words[(n*7)%12], words[(n*5+3)%12], n*n)
	item := fmt.Sprintf(`{"id":"msg_%d","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q}]}`, n, text)
	for i, ev := range []string{
		fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":{"id":%q,"object":"response","status":"in_progress","model":"gpt-4.1","output":[]}}`, id),
		fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_%d","type":"message","status":"in_progress","role":"assistant","content":[]}}`, n),
		fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_%d","output_index":0,"content_index":0,"delta":%q}`, n, text),
		"{\n  \"type\": \"response.vendor_extension\",\n  \"note\": \"unknown events pass\"\n}",
		fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":%s}`, item),
		fmt.Sprintf(`{"type":"response.completed","sequence_number":5,"response":{"id":%q,"object":"response","status":"completed","model":"gpt-4.1","output":[%s]}}`, id, item),
	} {
		_ = i
		if send(ev) != nil {
			return
		}
	}
}

// TestSocketHealthyTurnsUnchanged: over 200 turns on one socket, every
// message of either side reaches the other byte for byte and in order; the
// handshake's headers and subprotocol go through.
func TestSocketHealthyTurnsUnchanged(t *testing.T) {
	checkSocketLeaks(t)
	up := startSocketUpstream(t, textTurn)
	addr, events := startSocketProxy(t, up.URL+"/v1", nil)
	c := dialSocket(t, addr, "/s/run-1/v1/responses", http.Header{
		"Authorization": {"Bearer sk-test"}, "Openai-Beta": {"responses_websockets=2026-02-06"}, "X-Codex-Turn-Metadata": {"{}"}})
	if c.Subprotocol() != "v2" {
		t.Errorf("Subprotocol() = %q; want v2", c.Subprotocol())
	}
	var sentByClient, gotByClient []string
	prev := ""
	for n := 1; n <= 200; n++ {
		msg := fmt.Sprintf(`{"type":"response.create","model":"gpt-4.1","store":false,"input":[{"role":"user","content":"question %d %s"}]}`, n, strings.Repeat("x", n%7))
		if prev != "" {
			msg = fmt.Sprintf(`{"type":"response.create","model":"gpt-4.1","store":false,"previous_response_id":%q,"input":[{"role":"user","content":"question %d"}]}`, prev, n)
		}
		if n == 1 {
			msg = `{"type":"response.create","model":"gpt-4.1","generate":false,"store":false,"input":[{"role":"developer","content":"You are an agent."}]}`
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		sentByClient = append(sentByClient, msg)
		got := readTurn(t, c)
		gotByClient = append(gotByClient, got...)
		prev = gjson.Get(got[len(got)-1], "response.id").String()
	}
	// A ping goes through and its pong comes back.
	pong := make(chan string, 1)
	c.SetPongHandler(func(s string) error { pong <- s; return nil })
	_ = c.WriteControl(websocket.PingMessage, []byte("p1"), time.Now().Add(time.Second))
	go func() { _, _, _ = c.ReadMessage() }()
	select {
	case s := <-pong:
		if s != "p1" {
			t.Errorf("pong %q; want p1", s)
		}
	case <-time.After(5 * time.Second):
		t.Error("no pong")
	}
	_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
	select {
	case <-up.closed:
	case <-time.After(5 * time.Second):
		t.Error("the upstream socket was not closed after the client's close")
	}
	c.Close()

	got, sent := up.snapshot()
	if strings.Join(got, "\n") != strings.Join(sentByClient, "\n") {
		t.Errorf("the upstream got %d messages, changed; the client sent %d", len(got), len(sentByClient))
	}
	if len(gotByClient) != len(sent) {
		t.Fatalf("the client got %d messages; the upstream sent %d", len(gotByClient), len(sent))
	}
	for i := range sent {
		if gotByClient[i] != sent[i] {
			t.Fatalf("message %d: the client got %q; the upstream sent %q", i, gotByClient[i], sent[i])
		}
	}
	if h := up.header; h.Get("Authorization") != "Bearer sk-test" || h.Get("Openai-Beta") == "" || h.Get("X-Codex-Turn-Metadata") != "{}" {
		t.Errorf("upstream handshake headers %v", h)
	}
	evs := waitChatEvents(t, events, 199)
	if len(evs) != 199 {
		t.Errorf("%d chat events; want 199 (the prewarm is not a turn)", len(evs))
	}
	for _, e := range evs {
		if e.Session != "run-1" || e.Decision.Action != "none" {
			t.Errorf("turn: session %q action %s; want run-1, none", e.Session, e.Decision.Action)
			break
		}
	}
}

// TestSocketRefusedUpgrade: an upstream that refuses the socket refuses the
// client with its own status and body, so the client's HTTP fallback works.
func TestSocketRefusedUpgrade(t *testing.T) {
	up := startSocketUpstream(t, textTurn)
	addr, _ := startSocketProxy(t, up.URL, nil)
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/responses", http.Header{"X-Refuse": {"1"}})
	if err == nil || resp == nil {
		t.Fatalf("Dial: %v, %v; want a refusal", err, resp)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUpgradeRequired || !strings.Contains(string(body), "use HTTP") {
		t.Errorf("refusal %d %q; want 426 with the upstream's body", resp.StatusCode, body)
	}
}

// loopTurn answers every turn with the same call: the agent loops.
func loopTurn(n int, _ string, send func(string) error) {
	call := fmt.Sprintf(`{"id":"fc_%d","type":"function_call","status":"completed","call_id":"call_%d","name":"bash","arguments":"{\"command\":\"make build\"}"}`, n, n)
	resp := fmt.Sprintf(`{"id":"resp_%d","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[%s]}`, n, call)
	for _, ev := range []string{
		fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_%d","object":"response","created_at":1,"status":"in_progress","model":"gpt-4.1","output":[]}}`, n),
		fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":1,"output_index":0,"item":%s}`, call),
		fmt.Sprintf(`{"type":"response.completed","sequence_number":2,"response":%s}`, resp),
	} {
		if send(ev) != nil {
			return
		}
	}
}

// TestSocketSameActionsAsHTTP: the same looping agent gets the same actions
// turn by turn over a socket (previous_response_id and new items only) as
// over HTTP, and the socket's last turn is LOOP_DETECTED, answered on the
// socket, which stays usable.
func TestSocketSameActionsAsHTTP(t *testing.T) {
	tests := []struct {
		name  string
		store string // the store member of each turn
	}{
		{"stored", ""},
		{"store false on the socket", `"store":false,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := func(n int, prev string) string {
				if prev == "" {
					return `"model":"gpt-4.1","stream":true,` + tt.store + `"input":"Fix the build."}`
				}
				return fmt.Sprintf(`"model":"gpt-4.1","stream":true,%s"previous_response_id":%q,"input":[{"type":"function_call_output","call_id":"call_%d","output":"make: *** No rule to make target 'build'.  Stop."}]}`, tt.store, prev, n-1)
			}
			// HTTP, with the record loopguard keeps (store is not false there).
			n := 0
			httpUp, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				n++
				w.Header().Set("Content-Type", "text/event-stream")
				loopTurn(n, "", func(ev string) error {
					_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", gjson.Get(ev, "type").String(), ev)
					return err
				})
			})
			httpAddr, httpEvents := startSocketProxy(t, httpUp.URL, nil)
			prev := ""
			httpTurns := 0
			for i := 1; i <= 8; i++ {
				httpTurns = i
				body := "{" + strings.Replace(turn(i, prev), `"store":false,`, "", 1)
				resp, err := newClient().Post("http://"+httpAddr+"/v1/responses", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Header.Get(HeaderAction) == "terminate" {
					break
				}
				<-got
				prev = fmt.Sprintf("resp_%d", n)
			}

			wsUp := startSocketUpstream(t, loopTurn)
			wsAddr, wsEvents := startSocketProxy(t, wsUp.URL, nil)
			c := dialSocket(t, wsAddr, "/v1/responses", nil)
			defer c.Close()
			prev = ""
			var last []string
			wsTurns := 0
			for i := 1; i <= 8; i++ {
				wsTurns = i
				msg := `{"type":"response.create",` + turn(i, prev)
				if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				last = readTurn(t, c)
				prev = gjson.Get(last[len(last)-1], "response.id").String()
				// The turn's event is reported after its answer is written:
				// the answer itself says whether loopguard ended the loop.
				if strings.Contains(strings.Join(last, ""), "LOOP_DETECTED") {
					break
				}
			}
			// Each turn's event is reported once its answer ended, which may
			// be after the client has read the answer and sent the next turn:
			// wait for every turn's, and put them in the order the turns came.
			actions := func(events func() []ChatEvent, turns int) string {
				evs := waitChatEvents(t, events, turns)
				var a []string
				for _, e := range evs {
					a = append(a, string(e.Decision.Action))
				}
				return strings.Join(a, ",")
			}
			h, w := actions(httpEvents, httpTurns), actions(wsEvents, wsTurns)
			if h != w || !strings.HasSuffix(w, "terminate") {
				t.Errorf("socket actions %s; HTTP actions %s; want the same, ending in terminate", w, h)
			}
			var text string
			for _, m := range last {
				if gjson.Get(m, "type").String() == "response.output_text.delta" {
					text += gjson.Get(m, "delta").String()
				}
			}
			if !strings.HasPrefix(text, "LOOP_DETECTED") || gjson.Get(last[0], "type").String() != "response.created" ||
				gjson.Get(last[len(last)-1], "type").String() != "response.completed" {
				t.Errorf("the socket's last answer: %d events, text %.40q; want response.created ... response.completed with LOOP_DETECTED", len(last), text)
			}
			upGot, _ := wsUp.snapshot()
			if strings.Contains(upGot[len(upGot)-1], prev) && prev != "" {
				t.Errorf("the terminated turn reached the upstream")
			}
			// The socket stays usable.
			if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-4.1","input":"Something else."}`)); err != nil {
				t.Fatal(err)
			}
			if got := readTurn(t, c); gjson.Get(got[len(got)-1], "type").String() != "response.completed" {
				t.Errorf("after LOOP_DETECTED the socket answered %v", got)
			}
		})
	}
}

// TestSocketCutStopsUpstream: a degenerate answer is cut; the upstream
// socket closes within a second of the cut, and the client gets a terminal
// event for the response, then a normal close.
func TestSocketCutStopsUpstream(t *testing.T) {
	checkSocketLeaks(t)
	up := startSocketUpstream(t, func(n int, _ string, send func(string) error) {
		if send(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-4.1","output":[]}}`) != nil ||
			send(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`) != nil {
			return
		}
		for i := 0; i < 2000; i++ {
			if send(fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"I will check the configuration file again. "}`, i+2)) != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	addr, events := startSocketProxy(t, up.URL, nil)
	c := dialSocket(t, addr, "/v1/responses", nil)
	defer c.Close()
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-4.1","input":"Explain."}`)); err != nil {
		t.Fatal(err)
	}
	last := readTurn(t, c)
	cutAt := time.Now()
	if typ := gjson.Get(last[len(last)-1], "type").String(); typ != "response.completed" && typ != "response.incomplete" {
		t.Errorf("the cut answer ends with %s", typ)
	}
	_, _, err := c.ReadMessage()
	if ce, ok := err.(*websocket.CloseError); !ok || ce.Code != websocket.CloseNormalClosure {
		t.Errorf("after the cut: %v; want a normal close", err)
	}
	select {
	case <-up.closed:
		up.mu.Lock()
		if d := up.closedAt.Sub(cutAt); d > time.Second {
			t.Errorf("the upstream socket closed %v after the cut", d)
		}
		up.mu.Unlock()
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream socket is still open 2s after the cut")
	}
	if evs := waitChatEvents(t, events, 1); len(evs) != 1 || evs[0].Cut == nil {
		t.Errorf("chat events %+v; want one cut turn", evs)
	}
}

// TestSocketHangups: a client that drops its connection at any point, and an
// upstream that resets, leave no goroutine behind.
func TestSocketHangups(t *testing.T) {
	if testing.Short() {
		t.Skip("drops the connection at every point and waits out goroutine leaks: skipped under -short")
	}
	checkSocketLeaks(t)
	for _, after := range []int{0, 1, 3, 5} {
		up := startSocketUpstream(t, textTurn)
		addr, _ := startSocketProxy(t, up.URL, nil)
		c := dialSocket(t, addr, "/v1/responses", nil)
		_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-4.1","input":"hi"}`))
		for i := 0; i < after; i++ {
			_, _, _ = c.ReadMessage()
		}
		_ = c.NetConn().Close() // no close frame, as Codex at exit
		select {
		case <-up.closed:
		case <-time.After(5 * time.Second):
			t.Errorf("after %d events: the upstream socket outlived the client", after)
		}
	}
	// The upstream resets mid-answer: the client's socket ends.
	up := startSocketUpstream(t, func(n int, _ string, send func(string) error) {
		_ = send(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}`)
	})
	addr, _ := startSocketProxy(t, up.URL, nil)
	c := dialSocket(t, addr, "/v1/responses", nil)
	defer c.Close()
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-4.1","input":"hi"}`))
	_, _, _ = c.ReadMessage()
	up.mu.Lock()
	_ = up.conn.NetConn().Close() // a reset, without a close frame
	up.mu.Unlock()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := c.ReadMessage(); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("after the upstream reset the client read %v; want the socket closed", err)
	}
}

// TestSocketObserverPanicFailsOpen: a turn whose observer panics (here a
// detector bug on the first text) gives the client every message of the
// answer as the upstream sent it, in order; the observer is left alone for
// the rest of the turn, and the failure counts once.
func TestSocketObserverPanicFailsOpen(t *testing.T) {
	srv, base := startProxy(t, nil)
	sk := &socket{s: srv}
	pl := &plan{api: socketResponsesAPI, requestFacts: requestFacts{stream: true}, start: time.Now()}
	turn := sk.newSocketTurn(pl, nil)
	turn.rl.obs.(*answerObserver).watch.content[0] = &inspect.Degeneration{} // no ring buffer: panics
	var sent, got []string
	_ = eachEvent([]byte(streamAPIsByWire(t)[responsesAPI].healthy), func(data []byte) error {
		msg := string(data)
		sent = append(sent, msg)
		out, stop, ok := sk.observe(turn, socketEventType(data), data)
		if stop {
			t.Fatalf("the turn stopped at %.80s", msg)
		}
		if !ok || bytes.Equal(out, turn.frame) {
			got = append(got, msg)
			return nil
		}
		return eachEvent(out, func(d []byte) error { got = append(got, string(d)); return nil })
	})
	if !slices.Equal(got, sent) {
		t.Errorf("client got %d messages; want the upstream's %d as sent:\n%q", len(got), len(sent), got)
	}
	if !turn.rl.raw {
		t.Errorf("the turn's observer was not left alone after it panicked")
	}
	sk.finish(turn, nil)
	resp, err := newClient().Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `loopguard_fail_open_total{stage="stream"} 1`; !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}
