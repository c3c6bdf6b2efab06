package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// rawExchange sends raw, a whole request, to the proxy at base and returns
// the raw answer up to the end of its headers and the parsed response.
func rawExchange(t *testing.T, base, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestUnsolicitedUpgradeIs502: loopguard never asks for a protocol switch
// (Upgrade is hop-by-hop and dropped), so an upstream's 101 cannot be
// relayed, least of all without its Upgrade header: 502, as nginx answers.
func TestUnsolicitedUpgradeIs502(t *testing.T) {
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		if _, ok := u.readRequest(br); ok {
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			time.Sleep(100 * time.Millisecond)
		}
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
	resp := rawExchange(t, base, "GET /v1/realtime HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d; want 502", resp.StatusCode)
	}
}

// TestAnswerWithoutContentTypeGetsNone: an answer that carries no
// Content-Type reaches the client without one.
func TestAnswerWithoutContentTypeGetsNone(t *testing.T) {
	for _, framing := range []string{"Content-Length: 2\r\n\r\nok", "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"} {
		up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
			for {
				if _, ok := u.readRequest(br); !ok {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n"+framing)
			}
		})
		_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
		for _, req := range []string{
			"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
			"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 48\r\n\r\n" +
				`{"model":"m","messages":[{"role":"user","content":"h"}]}`[:48],
		} {
			resp := rawExchange(t, base, req)
			if ct, ok := resp.Header["Content-Type"]; ok {
				t.Errorf("%q answered %d with Content-Type %q; want none, as the upstream sent", strings.SplitN(req, "\r\n", 2)[0], resp.StatusCode, ct)
			}
		}
	}
}

// TestClientHalfCloseIs499: a client that half-closes its connection after
// its request, before the answer, is logged and counted as 499 (nginx's
// "client closed request"), not as a 502 upstream_error.
func TestClientHalfCloseIs499(t *testing.T) {
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		if _, ok := u.readRequest(br); ok {
			_, _ = br.ReadByte() // holds the answer until the proxy closes
		}
	})
	cfg := DefaultConfig()
	cfg.Upstream.URL = up.url()
	var logs syncBuffer
	_, base := observedProxy(t, cfg, zerolog.New(&logs), func(*Server) responseObserver { return nil })
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for up.reqs.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), `"message":"request"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no request logged 10s after the client half-closed: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if line := logs.String(); !strings.Contains(line, `"status":499`) {
		t.Errorf("logged %s; want status 499", line)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Errorf("the client got %q; want nothing, as nginx sends", b)
	}
}
