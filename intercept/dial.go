package intercept

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// A Dialer connects to hosts the way the user's environment says: through
// the proxy that its HTTPS_PROXY names (a CONNECT tunnel), unless NO_PROXY
// exempts the host, else directly. loopguard's own connections for a run
// (tunnels, intercepted hosts' upstreams) go where the agent's would have
// gone without loopguard.
type Dialer struct {
	proxy  func(*url.URL) (*url.URL, error)
	direct net.Dialer
}

// NewDialer reads the proxy variables (HTTPS_PROXY, NO_PROXY, in either
// case) through getenv, as they were before the run changed them. timeout
// bounds each connection's set-up.
func NewDialer(getenv func(string) string, timeout time.Duration) *Dialer {
	either := func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return getenv(lower(name))
	}
	cfg := httpproxy.Config{HTTPProxy: either("HTTP_PROXY"), HTTPSProxy: either("HTTPS_PROXY"), NoProxy: either("NO_PROXY")}
	return &Dialer{proxy: cfg.ProxyFunc(), direct: net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Proxy is the user's proxy for connections to addr (host:port), nil when
// they go directly.
func (d *Dialer) Proxy(addr string) *url.URL {
	u, err := d.proxy(&url.URL{Scheme: "https", Host: addr})
	if err != nil {
		return nil
	}
	return u
}

// DialContext connects to addr (host:port) over TCP, through the user's
// proxy when there is one for addr.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	p := d.Proxy(addr)
	if p == nil {
		return d.direct.DialContext(ctx, network, addr)
	}
	return d.connect(ctx, p, addr)
}

// connect opens a tunnel to addr through the proxy p.
func (d *Dialer) connect(ctx context.Context, p *url.URL, addr string) (net.Conn, error) {
	if d.direct.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.direct.Timeout)
		defer cancel()
	}
	paddr := p.Host
	if p.Port() == "" {
		paddr = net.JoinHostPort(p.Hostname(), map[bool]string{true: "443", false: "80"}[p.Scheme == "https"])
	}
	c, err := d.direct.DialContext(ctx, "tcp", paddr)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", p.Redacted(), err)
	}
	if p.Scheme == "https" {
		c = tls.Client(c, &tls.Config{ServerName: p.Hostname(), MinVersion: tls.VersionTLS12})
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n"
	if p.User != nil {
		pw, _ := p.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(p.User.Username()+":"+pw)) + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		c.Close()
		return nil, fmt.Errorf("proxy %s: %w", p.Redacted(), err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("proxy %s: %w", p.Redacted(), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("proxy %s refused CONNECT %s: %s", p.Redacted(), addr, resp.Status)
	}
	if !stop() {
		c.Close()
		return nil, ctx.Err()
	}
	if br.Buffered() > 0 {
		// The tunnel's first bytes came with the answer.
		return &prefixConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// prefixConn is a connection whose first bytes were read into r.
type prefixConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.r != nil && c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	c.r = nil
	return c.Conn.Read(p)
}
