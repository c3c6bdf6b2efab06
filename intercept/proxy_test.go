package intercept

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// startProxy serves a Proxy that intercepts hosts and returns it with its
// URL (credential included).
func startProxy(t testing.TB, hosts []string, getenv func(string) string) (*Proxy, string) {
	t.Helper()
	ca, err := NewCA(hosts)
	if err != nil {
		t.Fatal(err)
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	p, err := New(Options{CA: ca, Hosts: hosts, Dialer: NewDialer(getenv, 5*time.Second), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p, p.URL(ln.Addr())
}

// connect opens a CONNECT tunnel to target through the proxy at proxyURL,
// with the URL's credential when auth is set; it returns the connection
// and the proxy's status.
func connect(t testing.TB, proxyURL, target string, auth bool) (net.Conn, int) {
	t.Helper()
	u, err := url.Parse(proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth {
		pw, _ := u.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if br.Buffered() > 0 {
		// The tunnel's first bytes came with the answer.
		return &prefixConn{Conn: c, r: br}, resp.StatusCode
	}
	return c, resp.StatusCode
}

// TestProxyCredential: only a client with the run's credential may use
// the proxy; others get 407 with a challenge, on CONNECT and plain HTTP.
func TestProxyCredential(t *testing.T) {
	_, proxyURL := startProxy(t, []string{"chatgpt.com"}, nil)
	if c, status := connect(t, proxyURL, "chatgpt.com:443", false); status != http.StatusProxyAuthRequired {
		t.Errorf("CONNECT without the credential: %d; want 407", status)
	} else {
		c.Close()
	}
	u, _ := url.Parse(proxyURL)
	for _, user := range []*url.Userinfo{nil, url.UserPassword("loopguard", "wrong"), url.UserPassword("other", func() string { p, _ := u.User.Password(); return p }())} {
		pu := *u
		pu.User = user
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&pu)}}
		resp, err := client.Get("http://127.0.0.1:1/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" ||
			!bytes.Contains(body, []byte(`"code":"proxy_auth_required"`)) {
			t.Errorf("user %v: %d %q %s; want 407 with a challenge and an error body", user, resp.StatusCode, resp.Header.Get("Proxy-Authenticate"), body)
		}
	}
}

// echoServer serves on loopback: each connection gets back what it sends,
// each byte plus one, until it half-closes; then the server half-closes
// too.
func echoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					for i := range buf[:n] {
						buf[i]++
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
					if err != nil {
						c.(*net.TCPConn).CloseWrite()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestTunnelBytesBothWays: a CONNECT to a host that is not intercepted is
// a tunnel: every byte passes unchanged each way, and the client's half
// close reaches the host and the host's comes back.
func TestTunnelBytesBothWays(t *testing.T) {
	echo := echoServer(t)
	_, proxyURL := startProxy(t, []string{"chatgpt.com"}, nil)
	c, status := connect(t, proxyURL, echo, true)
	if status != http.StatusOK {
		t.Fatalf("CONNECT %s: %d; want 200", echo, status)
	}
	defer c.Close()
	sent := make([]byte, 1<<20)
	rand.Read(sent)
	go func() {
		c.Write(sent)
		closeWrite(c)
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(sent)
	for i := range want {
		want[i]++
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes back, want %d: the tunnel changed them", len(got), len(want))
	}
}

// TestTunnelUnreachable: a host that cannot be reached is answered 502.
func TestTunnelUnreachable(t *testing.T) {
	_, proxyURL := startProxy(t, []string{"chatgpt.com"}, nil)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c, status := connect(t, proxyURL, addr, true)
	c.Close()
	if status != http.StatusBadGateway {
		t.Fatalf("CONNECT to a closed port: %d; want 502", status)
	}
}

// TestInterceptHandsOver: a CONNECT to a model host is answered 200, its
// TLS is terminated with a certificate for the host that the run's CA
// signed (HTTP/1.1 only), and the decrypted connection comes out of
// Intercepted with the host it was meant for.
func TestInterceptHandsOver(t *testing.T) {
	p, proxyURL := startProxy(t, []string{"chatgpt.com"}, nil)
	c, status := connect(t, proxyURL, "chatgpt.com:443", true)
	if status != http.StatusOK {
		t.Fatalf("CONNECT: %d; want 200", status)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.o.CA.Certificate())
	tc := tls.Client(c, &tls.Config{ServerName: "chatgpt.com", RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
	defer tc.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		sc, err := p.Intercepted().Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- sc
	}()
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if st := tc.ConnectionState(); st.NegotiatedProtocol != "http/1.1" || st.Version != tls.VersionTLS13 {
		t.Errorf("negotiated %q over %x; want http/1.1 over TLS 1.3", st.NegotiatedProtocol, st.Version)
	}
	sc := <-accepted
	if sc == nil {
		t.FailNow()
	}
	defer sc.Close()
	if h := sc.(*Conn).Host(); h != "chatgpt.com:443" {
		t.Errorf("Host() = %q; want chatgpt.com:443", h)
	}
	go io.WriteString(tc, "GET / HTTP/1.1\r\n")
	buf := make([]byte, 16)
	if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("read %q, %v; want the client's bytes decrypted", buf, err)
	}
}

// TestInterceptUntrustedCA: an agent that does not trust the run's CA
// refuses the handshake; nothing is handed over.
func TestInterceptUntrustedCA(t *testing.T) {
	_, proxyURL := startProxy(t, []string{"chatgpt.com"}, nil)
	c, _ := connect(t, proxyURL, "chatgpt.com:443", true)
	tc := tls.Client(c, &tls.Config{ServerName: "chatgpt.com"})
	defer tc.Close()
	if err := tc.Handshake(); err == nil {
		t.Fatal("the handshake succeeded with the system roots; want the run's CA unknown to them")
	}
}

// TestPlainHTTPForwarded: a plain http:// request through the proxy
// reaches its host, without the proxy's credential.
func TestPlainHTTPForwarded(t *testing.T) {
	var gotAuth string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Proxy-Authorization")
		io.WriteString(w, "plain "+r.URL.Path)
	})}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Close()
	_, proxyURL := startProxy(t, []string{"chatgpt.com"}, nil)
	pu, _ := url.Parse(proxyURL)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/file")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "plain /file" || gotAuth != "" {
		t.Fatalf("%d %q, Proxy-Authorization upstream %q; want 200 %q and none", resp.StatusCode, body, gotAuth, "plain /file")
	}
}

// TestDialerThroughUserProxy: with HTTPS_PROXY set, loopguard's own
// connections go through the user's proxy (its credential from the URL),
// and NO_PROXY hosts directly.
func TestDialerThroughUserProxy(t *testing.T) {
	_, userURL := startProxy(t, []string{"chatgpt.com"}, nil)
	const host = "example.test:443" // httpproxy never proxies loopback
	for _, tc := range []struct {
		name    string
		env     map[string]string
		proxied bool
	}{
		{"upper case", map[string]string{"HTTPS_PROXY": userURL}, true},
		{"lower case", map[string]string{"https_proxy": userURL}, true},
		{"no_proxy", map[string]string{"HTTPS_PROXY": userURL, "NO_PROXY": ".test"}, false},
		{"none", nil, false},
	} {
		d := NewDialer(func(k string) string { return tc.env[k] }, 5*time.Second)
		if got := d.Proxy(host) != nil; got != tc.proxied {
			t.Errorf("%s: Proxy(%s) = %v; want proxied %v", tc.name, host, d.Proxy(host), tc.proxied)
		}
	}

	echo := echoServer(t)
	d := NewDialer(func(string) string { return "" }, 5*time.Second)
	pu, _ := url.Parse(userURL)
	c, err := d.connect(context.Background(), pu, echo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "abc")
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "bcd" {
		t.Fatalf("read %q, %v; want bcd", buf, err)
	}
	pu.User = url.UserPassword("loopguard", "wrong")
	if _, err := d.connect(context.Background(), pu, echo); err == nil || !strings.Contains(err.Error(), "407") {
		t.Fatalf("through a proxy that refuses the credential: %v; want its 407", err)
	}
}

// TestNodeAcceptsConstrainedCA: Node, which most agents run on, trusts
// the run's CA from NODE_EXTRA_CA_CERTS for an intercepted host and
// honours its name constraints for any other. Skipped without node.
func TestNodeAcceptsConstrainedCA(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	ca, err := NewCA([]string{"chatgpt.com"})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		ok   bool
	}{{"chatgpt.com", true}, {"github.com", false}} {
		leaf, _ := ca.Leaf(tc.host)
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*leaf}})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		script := `const s = require("tls").connect({host: "127.0.0.1", port: ` + strings.Split(ln.Addr().String(), ":")[1] +
			`, servername: "` + tc.host + `"}, () => { console.log("trusted"); s.destroy(); });
s.on("error", e => { console.log("refused: " + e.code + " " + e.message); });`
		cmd := exec.Command(node, "-e", script)
		cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+file)
		out, err := cmd.CombinedOutput()
		ln.Close()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		t.Logf("node, certificate for %s: %s", tc.host, bytes.TrimSpace(out))
		if got := bytes.HasPrefix(out, []byte("trusted")); got != tc.ok {
			t.Errorf("node, certificate for %s: %s; want trusted %v", tc.host, out, tc.ok)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// FuzzAuthorized: any Proxy-Authorization value is read without a panic,
// and only the proxy's own credential passes.
func FuzzAuthorized(f *testing.F) {
	p := &Proxy{user: proxyUser, token: "0123456789abcdef"}
	good := "Basic " + base64.StdEncoding.EncodeToString([]byte(proxyUser+":0123456789abcdef"))
	for _, seed := range []string{good, "", "Basic", "Basic !!!", "Bearer x", "basic " + base64.StdEncoding.EncodeToString([]byte("loopguard:")),
		"Basic " + base64.StdEncoding.EncodeToString([]byte("loopguard:0123456789abcdeF"))} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if p.authorized(v) {
			scheme, enc, _ := strings.Cut(v, " ")
			b, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
			if !strings.EqualFold(scheme, "Basic") || string(b) != proxyUser+":0123456789abcdef" {
				t.Fatalf("authorized(%q) with another credential", v)
			}
		}
	})
}
