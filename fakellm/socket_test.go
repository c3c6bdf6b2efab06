package fakellm

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
)

func dialResponses(t *testing.T, s *Server, path string) *websocket.Conn {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer sk-test")
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	c, resp, err := d.Dial("ws"+strings.TrimPrefix(s.URL(), "http")+path, h)
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", path, err, resp)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readAnswer reads the messages of one response up to its terminal event.
func readAnswer(t *testing.T, c *websocket.Conn) []string {
	t.Helper()
	var out []string
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read after %d messages: %v", len(out), err)
		}
		out = append(out, string(msg))
		switch gjson.GetBytes(msg, "type").String() {
		case "response.completed", "response.failed", "response.incomplete", "error":
			return out
		}
	}
}

func sendJSON(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// TestSocketTurns: a prewarm gets an empty response; each turn gets the
// rule's events one message each, the same as its SSE stream; a turn that
// continues a response is shown to the rule with the full input; each turn
// is recorded as the POST it stands for.
func TestSocketTurns(t *testing.T) {
	var inputs []string
	s := Start(t, Script{Rules: []Rule{ResponsesRule(func(r *Request) ResponsesAnswer {
		inputs = append(inputs, gjson.GetBytes(r.Body, "input.#.type").Raw)
		return ResponsesAnswer{Calls: []ToolCall{{Name: "exec_command", Arguments: `{"cmd":"ls"}`}}}
	})}})
	for _, base := range []string{"/v1", "/backend-api/codex"} {
		inputs = nil
		s.Reset()
		c := dialResponses(t, s, base+"/responses")
		sendJSON(t, c, `{"type":"response.create","generate":false,"model":"m","input":[{"type":"message","role":"developer","content":"be brief"}],"tools":[],"store":false,"stream":true}`)
		pre := readAnswer(t, c)
		if len(pre) != 2 || gjson.Get(pre[0], "type").String() != "response.created" ||
			gjson.Get(pre[1], "type").String() != "response.completed" || gjson.Get(pre[1], "response.output.#").Int() != 0 {
			t.Fatalf("prewarm answered %q; want response.created and response.completed with no output", pre)
		}
		prev := gjson.Get(pre[1], "response.id").String()
		for turn := range 3 {
			item := `{"type":"message","role":"user","content":"go"}`
			if turn > 0 {
				item = `{"type":"function_call_output","call_id":"c","output":"ok"}`
			}
			sendJSON(t, c, `{"type":"response.create","model":"m","previous_response_id":"`+prev+`","input":[`+item+`]}`)
			evs := readAnswer(t, c)
			last := evs[len(evs)-1]
			if gjson.Get(last, "type").String() != "response.completed" {
				t.Fatalf("turn %d ended with %s", turn, last)
			}
			prev = gjson.Get(last, "response.id").String()
		}
		want := []string{`["message","message"]`, `["message","message","function_call","function_call_output"]`,
			`["message","message","function_call","function_call_output","function_call","function_call_output"]`}
		if strings.Join(inputs, " ") != strings.Join(want, " ") {
			t.Fatalf("the rule saw inputs %q; want %q", inputs, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		xs, _ := s.Wait(ctx, func(xs []Exchange) bool { return len(xs) == 4 && xs[3].Done })
		cancel()
		if len(xs) != 4 || xs[0].Status != http.StatusSwitchingProtocols {
			t.Fatalf("recorded %d exchanges (first status %d); want the handshake and 3 turns", len(xs), xs[0].Status)
		}
		for _, x := range xs[1:] {
			r := x.Request
			if !r.Socket || r.Method != http.MethodPost || r.Path != base+"/responses" || r.Header.Get("Authorization") != "Bearer sk-test" ||
				!x.Done || x.Events != 8 || gjson.GetBytes(r.Body, "type").Exists() || gjson.GetBytes(r.Body, "previous_response_id").Exists() {
				t.Fatalf("turn recorded as %s %s socket %v done %v events %d: %s", r.Method, r.Path, r.Socket, x.Done, x.Events, r.Body)
			}
		}
		_ = c.Close()
	}
}

// TestSocketEventsMatchSSE: one message per event of the SSE stream of the
// same answer, byte for byte.
func TestSocketEventsMatchSSE(t *testing.T) {
	// Two servers, so that both answers are their rule's first: the ids
	// are generated from it, the usage from the body the rule sees.
	rule := func() Script {
		return Script{Rules: []Rule{ResponsesRule(func(*Request) ResponsesAnswer {
			return ResponsesAnswer{Text: "hello there, a few words", ChunkSize: 5}
		})}}
	}
	_, _, sse := post(t, Start(t, rule()).URL(), "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`, nil)
	c := dialResponses(t, Start(t, rule()), "/v1/responses")
	sendJSON(t, c, `{"type":"response.create","model":"m","stream":true,"input":"hi"}`)
	got := readAnswer(t, c)
	var want []string
	for _, d := range frameData(sse) {
		want = append(want, string(d))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("socket events:\n%s\nSSE events:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSocketRefusedAndUnknownPrevious: RefuseSockets answers the upgrade
// 426; an unknown previous_response_id is the API's error event, and the
// socket goes on.
func TestSocketRefusedAndUnknownPrevious(t *testing.T) {
	s := Start(t, Script{Rules: []Rule{ResponsesRule(func(*Request) ResponsesAnswer { return ResponsesAnswer{Text: "ok"} })}})
	s.RefuseSockets(true)
	_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(s.URL(), "http")+"/v1/responses", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("refused dial: %v, %v; want 426", err, resp)
	}
	s.RefuseSockets(false)
	c := dialResponses(t, s, "/v1/responses")
	sendJSON(t, c, `{"type":"response.create","model":"m","previous_response_id":"resp_gone","input":[]}`)
	if evs := readAnswer(t, c); len(evs) != 1 || gjson.Get(evs[0], "error.code").String() != "previous_response_not_found" {
		t.Fatalf("unknown previous id answered %q", evs)
	}
	sendJSON(t, c, `{"type":"response.create","model":"m","input":"hi"}`)
	if evs := readAnswer(t, c); gjson.Get(evs[len(evs)-1], "type").String() != "response.completed" {
		t.Fatalf("the socket did not go on: %q", evs)
	}
}

// TestSocketPeerClosed: a client that drops the socket in the middle of an
// endless answer is recorded on the turn, promptly.
func TestSocketPeerClosed(t *testing.T) {
	s := Start(t, Script{Rules: []Rule{ResponsesRule(func(*Request) ResponsesAnswer { return ResponsesAnswer{NeverEnd: true} })}})
	c := dialResponses(t, s, "/v1/responses")
	sendJSON(t, c, `{"type":"response.create","model":"m","input":"hi"}`)
	for range 5 {
		if _, _, err := c.ReadMessage(); err != nil {
			t.Fatal(err)
		}
	}
	closed := time.Now()
	_ = c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	xs, err := s.Wait(ctx, func(xs []Exchange) bool { return len(xs) == 2 && xs[1].Done && xs[0].Done })
	if err != nil {
		t.Fatalf("%v: %+v", err, xs)
	}
	if x := xs[1]; !x.PeerClosed || x.ClosedAt.Sub(closed) > time.Second || x.Unsent <= 0 {
		t.Fatalf("turn recorded PeerClosed %v after %v, unsent %d", x.PeerClosed, x.ClosedAt.Sub(closed), x.Unsent)
	}
	if !xs[0].PeerClosed {
		t.Fatal("the handshake's exchange does not say the client closed the socket")
	}
}
