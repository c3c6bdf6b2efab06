package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/loopguard/loopguard/intercept"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

// startIntercepted serves a proxy whose intercepted connections (from a
// real forward proxy, intercepting hosts) go to upstream, whatever their
// host. It returns the server and a client that goes through the forward
// proxy and trusts the run's CA, and the forward proxy's URL and CA.
func startIntercepted(t *testing.T, upstream string, mutate func(*Config)) (*Server, *http.Client, *url.URL, *x509.CertPool) {
	t.Helper()
	hosts := []string{"chatgpt.com", "api.githubcopilot.com", "api.anthropic.com"}
	ca, err := intercept.NewCA(hosts)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := intercept.New(intercept.Options{CA: ca, Hosts: hosts, Log: zerolog.Nop(),
		Dialer: intercept.NewDialer(func(string) string { return "" }, 5*time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := startProxyWith(t, func(c *Config) {
		c.Upstream.URL = "http://127.0.0.1:1" // never used: every request is intercepted
		c.Upstream.APIKey = "sk-operator"     // never sent to an intercepted host
		if mutate != nil {
			mutate(c)
		}
	}, WithInterception(Interception{Session: "run-icpt", BaseURL: func(string) string { return upstream }}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go fp.Serve(ln)
	go srv.Serve(fp.Intercepted())
	t.Cleanup(func() { fp.Close() }) // before the Server's shutdown: cleanups run last first
	pu, _ := url.Parse(fp.URL(ln.Addr()))
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}, DisableCompression: true, DisableKeepAlives: true}}
	return srv, client, pu, roots
}

// TestInterceptedRequests: requests on intercepted connections go to the
// host as sent, every path (loopguard's own included), with the agent's
// own credentials; a healthy answer reaches the agent byte for byte, and
// the guarded APIs' paths are inspected wherever their prefix is.
func TestInterceptedRequests(t *testing.T) {
	const answer = `{"id":"resp_1", "object":"response","output":[]}` + "\n"
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req-1")
		io.WriteString(w, answer)
	})
	_, client, _, _ := startIntercepted(t, up.URL, nil)
	for _, tc := range []struct {
		method, url, body string
		wantPath          string
	}{
		{"POST", "https://chatgpt.com/backend-api/codex/responses", responsesHistory(1, false), "/backend-api/codex/responses"},
		{"GET", "https://chatgpt.com/backend-api/wham/accounts/check", "", "/backend-api/wham/accounts/check"},
		{"GET", "https://chatgpt.com/healthz", "", "/healthz"},
		{"GET", "https://chatgpt.com/loopguard/api/sessions", "", "/loopguard/api/sessions"},
		{"GET", "https://chatgpt.com/s/abc/v1/models?x=1", "", "/s/abc/v1/models?x=1"},
		{"POST", "https://api.githubcopilot.com/chat/completions", `{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}`, "/chat/completions"},
	} {
		req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer agent-token")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != answer || resp.Header.Get("X-Request-Id") != "req-1" {
			t.Errorf("%s %s: %d %q; want the upstream's answer as it sent it", tc.method, tc.url, resp.StatusCode, b)
		}
		r := <-got
		if r.uri != tc.wantPath || r.body != tc.body || r.header.Get("Authorization") != "Bearer agent-token" {
			t.Errorf("%s %s: the upstream got %s %q with Authorization %q; want %s, the body and the agent's token as sent",
				tc.method, tc.url, r.uri, r.body, r.header.Get("Authorization"), tc.wantPath)
		}
	}
}

// TestInterceptedLoopEnds: a looping agent on an intercepted host is seen
// in the run's session, and its loop ends with LOOP_DETECTED, on the
// ChatGPT Codex backend's path and on Copilot's.
func TestInterceptedLoopEnds(t *testing.T) {
	for _, tc := range []struct {
		url     string
		history func(int, bool) string
	}{
		{"https://chatgpt.com/backend-api/codex/responses", responsesHistory},
		{"https://api.anthropic.com/v1/messages?beta=true", anthropicHistory},
	} {
		up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"x","ok":true}`)
		})
		srv, client, _, _ := startIntercepted(t, up.URL, nil)
		var actions []string
		for n := 1; n <= 5; n++ {
			resp, err := client.Post(tc.url, "application/json", strings.NewReader(tc.history(n, false)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			actions = append(actions, resp.Header.Get(HeaderAction))
			if n == 5 && !strings.Contains(string(b), "LOOP_DETECTED") {
				t.Errorf("%s: last answer %s; want LOOP_DETECTED", tc.url, b)
			}
			if n < 5 {
				select {
				case <-got:
				default:
					t.Fatalf("%s: call %d (%s) did not reach the host", tc.url, n, actions[n-1])
				}
			}
		}
		if a := strings.Join(actions, ","); a != "none,none,warn,constrain,terminate" {
			t.Errorf("%s: actions %v; want the ladder up to terminate", tc.url, a)
		}
		sum, _, ok := srv.Recorder().Session("run-icpt")
		if !ok || sum.Requests != 5 {
			t.Errorf("the run's session: %+v, %v; want its 5 requests", sum, ok)
		}
	}
}

// TestInterceptedSocket: Codex's Responses WebSocket on chatgpt.com goes
// through the interception: its handshake reaches the host, healthy
// turns pass unchanged, and a looping agent gets LOOP_DETECTED on its
// socket.
func TestInterceptedSocket(t *testing.T) {
	for _, looping := range []bool{false, true} {
		script := textTurn
		if looping {
			script = loopTurn
		}
		su := startSocketUpstream(t, script)
		_, _, pu, roots := startIntercepted(t, su.URL, nil)
		d := websocket.Dialer{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}, HandshakeTimeout: 5 * time.Second}
		c, resp, err := d.Dial("wss://chatgpt.com/backend-api/codex/responses", http.Header{"Authorization": {"Bearer agent-token"}})
		if err != nil {
			t.Fatalf("Dial: %v (%v)", err, resp)
		}
		prev, ended := "", false
		for n := 1; n <= 8 && !ended; n++ {
			msg := `{"type":"response.create","model":"gpt-4.1","input":"Fix the build."}`
			if prev != "" {
				msg = fmt.Sprintf(`{"type":"response.create","model":"gpt-4.1","previous_response_id":%q,"input":[{"type":"function_call_output","call_id":"call_%d","output":"make: *** No rule to make target 'build'.  Stop."}]}`, prev, n-1)
			}
			if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			turn := readTurn(t, c)
			prev = gjson.Get(turn[len(turn)-1], "response.id").String()
			ended = strings.Contains(strings.Join(turn, "\n"), "LOOP_DETECTED")
			if !looping {
				_, sent := su.snapshot()
				if strings.Join(turn, "\n") != strings.Join(sent[len(sent)-len(turn):], "\n") {
					t.Fatalf("turn %d: the agent got %q; the host sent %q", n, turn, sent[len(sent)-len(turn):])
				}
			}
		}
		c.Close()
		if ended != looping {
			t.Errorf("looping %v: LOOP_DETECTED %v", looping, ended)
		}
		su.mu.Lock()
		auth := su.header.Get("Authorization")
		su.mu.Unlock()
		if auth != "Bearer agent-token" {
			t.Errorf("the host's handshake had Authorization %q; want the agent's", auth)
		}
	}
}
