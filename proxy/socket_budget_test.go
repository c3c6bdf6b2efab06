package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
)

// TestSocketHandshakeCheckedFirst: a client's handshake that the protocol
// refuses is refused before the upstream is dialled (with the client's
// credentials, or the operator's key): 426 naming version 13 for another
// version, 400 for the rest, each an OpenAI-shaped error.
func TestSocketHandshakeCheckedFirst(t *testing.T) {
	var dialled atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dialled.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	defer up.Close()
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL; c.Upstream.APIKey = "sk-operator" })
	good := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	for _, tt := range []struct {
		name   string
		set    map[string]string
		status int
	}{
		{"no key", map[string]string{"Sec-WebSocket-Key": ""}, http.StatusBadRequest},
		{"version 8", map[string]string{"Sec-WebSocket-Version": "8"}, http.StatusUpgradeRequired},
		{"5-byte key", map[string]string{"Sec-WebSocket-Key": "aGVsbG8="}, http.StatusBadRequest},
		{"key not base64", map[string]string{"Sec-WebSocket-Key": "!!!!!!!!!!!!!!!!!!!!!!=="}, http.StatusBadRequest},
		{"no Connection upgrade", map[string]string{"Connection": "keep-alive"}, http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/responses", nil)
			for k, v := range good {
				req.Header.Set(k, v)
			}
			for k, v := range tt.set {
				if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, body := doRequest(t, req)
			if resp.StatusCode != tt.status || !gjson.Get(body, "error.message").Exists() {
				t.Errorf("%d %s; want %d with an OpenAI-shaped error", resp.StatusCode, body, tt.status)
			}
			if tt.status == http.StatusUpgradeRequired && resp.Header.Get("Sec-WebSocket-Version") != "13" {
				t.Errorf("426 without Sec-WebSocket-Version: 13")
			}
		})
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("the upstream was dialled %d times for handshakes loopguard refuses; want 0", n)
	}
}

// doRequest sends req on a connection of its own and reads the answer.
func doRequest(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestSocketEndsPassOnAtOnce: a client that drops its connection without a
// close frame has its upstream socket closed at once (within 100 ms, not
// after the 2 s a close handshake may take); an upstream that drops its
// connection mid-message ends the client's socket with a close frame of
// code 1011, not a bare end of stream.
func TestSocketEndsPassOnAtOnce(t *testing.T) {
	checkSocketLeaks(t)
	up := startSocketUpstream(t, textTurn)
	addr, _ := startSocketProxy(t, up.URL, nil)
	c := dialSocket(t, addr, "/v1/responses", nil)
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-4.1","input":"hi"}`))
	readTurn(t, c)
	dropped := time.Now()
	_ = c.NetConn().Close()
	select {
	case <-up.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream socket outlived the client")
	}
	up.mu.Lock()
	took := up.closedAt.Sub(dropped)
	up.mu.Unlock()
	if took > 100*time.Millisecond {
		t.Errorf("the upstream socket closed %v after the client dropped; want within 100ms", took)
	}

	// The upstream drops mid-message: a frame that says 100 bytes, and 10.
	up2 := startSocketUpstream(t, func(n int, _ string, send func(string) error) {
		_ = send(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}`)
	})
	addr2, _ := startSocketProxy(t, up2.URL, nil)
	c2 := dialSocket(t, addr2, "/v1/responses", nil)
	defer c2.Close()
	_ = c2.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"gpt-4.1","input":"hi"}`))
	if _, _, err := c2.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	up2.mu.Lock()
	raw := up2.conn.NetConn()
	_, _ = raw.Write(append([]byte{0x81, 100}, `{"type":"`...))
	_ = raw.Close()
	up2.mu.Unlock()
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, _, err := c2.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseInternalServerErr {
		t.Errorf("after the upstream dropped mid-message the client read %v; want a close frame of code 1011", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the client's socket ended %v after the upstream's; want at once", took)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the client's socket stayed open")
	}
}
