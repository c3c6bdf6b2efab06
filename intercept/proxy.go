package intercept

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// debugWriter writes each line it is given to l at debug level.
type debugWriter struct{ l zerolog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.l.Debug().Msg(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Options configure a Proxy.
type Options struct {
	// CA signs the intercepted hosts' certificates.
	CA *CA
	// Hosts are the host names whose CONNECTs are intercepted (Hosts);
	// every other CONNECT is tunnelled.
	Hosts []string
	// Dialer reaches the hosts of tunnels and plain HTTP requests.
	Dialer *Dialer
	// HandshakeTimeout bounds the TLS handshake of an intercepted
	// connection, and the set-up of a tunnel. Default 10s.
	HandshakeTimeout time.Duration
	Log              zerolog.Logger
}

// Proxy is an HTTP forward proxy for one run's agent. It answers only
// requests that carry its credential (Proxy-Authorization), so that other
// local users and processes cannot use it: others get 407. Create it with
// New, serve it with Serve, take its intercepted connections from
// Intercepted, end it with Close.
type Proxy struct {
	o         Options
	hosts     map[string]bool
	user      string
	token     string
	srv       *http.Server
	plain     *httputil.ReverseProxy
	decrypted *listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // hijacked client connections
	closed bool
	wg     sync.WaitGroup // the goroutines of hijacked connections
}

// proxyUser is the user name of the proxy's credential; the token is the
// secret.
const proxyUser = "loopguard"

// New makes the proxy and its credential.
func New(o Options) (*Proxy, error) {
	if o.CA == nil || o.Dialer == nil {
		return nil, errors.New("intercept: a proxy needs a CA and a dialer")
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	p := &Proxy{o: o, hosts: map[string]bool{}, user: proxyUser, token: hex.EncodeToString(tok[:]),
		decrypted: newListener(), conns: map[net.Conn]struct{}{}}
	for _, h := range o.Hosts {
		p.hosts[hostName(h)] = true
	}
	p.plain = &httputil.ReverseProxy{
		// The request line holds the absolute URL: it is the target as
		// it is. Hop-by-hop headers, Proxy-Authorization among them,
		// are dropped by ReverseProxy.
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.Host = "" },
		Transport: &http.Transport{
			Proxy: func(r *http.Request) (*url.URL, error) {
				return o.Dialer.proxy(r.URL)
			},
			DialContext:           o.Dialer.direct.DialContext,
			ResponseHeaderTimeout: 0, // a slow download is the user's business
			IdleConnTimeout:       90 * time.Second,
		},
		ErrorLog: log.New(debugWriter{o.Log}, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			o.Log.Debug().Err(err).Str("host", r.URL.Host).Msg("proxied request failed")
			proxyError(w, http.StatusBadGateway, "loopguard: the request through the proxy failed: "+err.Error(), "upstream_error")
		},
	}
	// net/http's own complaints (a client's bad request line) go to the
	// run's log, not to the terminal the agent writes to.
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(debugWriter{o.Log}, "", 0)}
	return p, nil
}

// URL is the proxy's URL for clients, its credential in it, when it
// listens on addr.
func (p *Proxy) URL(addr net.Addr) string {
	return "http://" + p.user + ":" + p.token + "@" + addr.String()
}

// Serve accepts the agent's connections on ln until Close.
func (p *Proxy) Serve(ln net.Listener) error {
	err := p.srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Intercepted is the listener of the intercepted connections, decrypted:
// each is a *Conn whose Host is the host:port the agent asked for.
func (p *Proxy) Intercepted() net.Listener { return p.decrypted }

// Close stops the proxy: its listeners and every connection it holds,
// tunnels included. Intercepted connections already handed over are the
// receiver's.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	_ = p.decrypted.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// hold keeps c, a hijacked connection, until release; false when the
// proxy is closing.
func (p *Proxy) hold(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) release(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.wg.Done()
}

// ServeHTTP answers one request to the proxy: CONNECT, or a plain HTTP
// request in absolute form.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r.Header.Get("Proxy-Authorization")) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="loopguard"`)
		proxyError(w, http.StatusProxyAuthRequired, "loopguard: this proxy serves one `loopguard run`; its URL holds the credential", "proxy_auth_required")
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.IsAbs() && (r.URL.Scheme == "http" || r.URL.Scheme == "https"):
		p.plain.ServeHTTP(w, r)
	default:
		proxyError(w, http.StatusBadRequest, "loopguard: a proxy request needs an absolute URL", "bad_request")
	}
}

// authorized checks a Proxy-Authorization value against the credential.
func (p *Proxy) authorized(v string) bool {
	scheme, enc, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return false
	}
	user, token, _ := strings.Cut(string(b), ":")
	return user == p.user && subtle.ConstantTimeCompare([]byte(token), []byte(p.token)) == 1
}

// connect serves a CONNECT: intercepted when its host is a model host,
// tunnelled otherwise.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(strings.Trim(target, "[]"), "443")
	}
	host := hostName(target)
	var up net.Conn
	if !p.hosts[host] {
		ctx, cancel := context.WithTimeout(r.Context(), p.o.HandshakeTimeout)
		var err error
		up, err = p.o.Dialer.DialContext(ctx, "tcp", target)
		cancel()
		if err != nil {
			p.o.Log.Debug().Err(err).Str("host", target).Msg("tunnel: cannot reach the host")
			proxyError(w, http.StatusBadGateway, "loopguard: cannot reach "+target, "upstream_unreachable")
			return
		}
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		if up != nil {
			up.Close()
		}
		proxyError(w, http.StatusInternalServerError, "loopguard: cannot take the connection over", "server_error")
		return
	}
	if !p.hold(c) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	_ = c.SetDeadline(time.Time{}) // the server's read deadline is for the request
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.Close()
		p.release(c)
		if up != nil {
			up.Close()
		}
		return
	}
	var client net.Conn = c
	if brw.Reader.Buffered() > 0 {
		// The client sent its first bytes without waiting for the 200.
		client = &prefixConn{Conn: c, r: brw.Reader}
	}
	if up != nil {
		go func() {
			defer p.release(c)
			tunnel(client, up)
		}()
		return
	}
	go func() {
		defer p.release(c)
		p.intercept(client, target, host)
	}()
}

// intercept terminates the client's TLS as host and hands the connection
// to the Intercepted listener.
func (p *Proxy) intercept(c net.Conn, target, host string) {
	cert, err := p.o.CA.Leaf(host)
	if err != nil {
		p.o.Log.Error().Err(err).Str("host", host).Msg("intercept: no certificate")
		c.Close()
		return
	}
	tc := tls.Server(c, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		// HTTP/1.1 only: the proxy's server speaks it, and every agent
		// falls back to it (README.md: Interception).
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(context.Background(), p.o.HandshakeTimeout)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		// An agent that does not trust the run's CA ends here.
		p.o.Log.Warn().Err(err).Str("host", target).Msg("intercept: TLS handshake with the agent failed")
		c.Close()
		return
	}
	p.decrypted.put(&Conn{Conn: tc, host: target})
}

// tunnel copies bytes both ways until both directions ended; each end's
// close is passed on as a half close.
func tunnel(client, up net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, client)
		closeWrite(up)
	}()
	_, _ = io.Copy(client, up)
	closeWrite(client)
	<-done
	client.Close()
	up.Close()
}

func closeWrite(c net.Conn) {
	if pc, ok := c.(*prefixConn); ok {
		c = pc.Conn
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// proxyError answers with loopguard's JSON error shape.
func proxyError(w http.ResponseWriter, status int, msg, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := jsonError(msg, code)
	_, _ = w.Write(b)
}
