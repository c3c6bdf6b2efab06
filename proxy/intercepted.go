package proxy

import (
	"context"
	"net"
	"sync"

	"github.com/valyala/fasthttp"
)

// Interception is how a Server serves the connections that the forward
// proxy of `loopguard run` intercepted (package intercept). Each is meant
// for one host, which it names (Host() string): its requests, every path,
// go to that host as sent, through the same pipeline as any other
// request, and never reach loopguard's own endpoints.
type Interception struct {
	// Session is the session of every request on them.
	Session string
	// BaseURL is the upstream of a host:port: https://host, or where
	// -resolve sends it.
	BaseURL func(hostport string) string
	// Dial reaches the upstreams; nil dials directly.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// WithInterception serves intercepted connections as i says.
func WithInterception(i Interception) Option {
	return func(s *Server) { s.icpt = &interception{Interception: i, session: []byte(i.Session)} }
}

// interception is a Server's Interception and the upstreams of the hosts
// seen so far.
type interception struct {
	Interception
	session []byte
	mu      sync.Mutex
	hosts   map[string]*upstream
}

// hostConn is a client connection meant for one host (intercept.Conn).
type hostConn interface{ Host() string }

// interceptedHost is the host:port the connection of ctx was meant for,
// "" when it came to loopguard itself.
func interceptedHost(ctx *fasthttp.RequestCtx) string {
	if cc, ok := ctx.Conn().(*clientConn); ok {
		return cc.host
	}
	return ""
}

// hostUpstream is the upstream of hostport, made on first use; nil when
// the Server does not intercept or the host's URL is unusable.
func (s *Server) hostUpstream(hostport string) *upstream {
	i := s.icpt
	if i == nil {
		return nil
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if up, ok := i.hosts[hostport]; ok {
		return up
	}
	c := s.cfg.Upstream
	c.URL = i.BaseURL(hostport)
	up, err := newUpstream(c)
	if err != nil {
		s.log.Error().Err(err).Str("host", hostport).Msg("no upstream for an intercepted host")
		return nil
	}
	if i.Dial != nil {
		up.dial = i.Dial
	}
	if i.hosts == nil {
		i.hosts = map[string]*upstream{}
	}
	i.hosts[hostport] = up
	return up
}

// closeIdle closes the idle connections of the hosts' upstreams.
func (i *interception) closeIdle() {
	if i == nil {
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, up := range i.hosts {
		up.client.CloseIdleConnections()
	}
}
