package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// upstream is the one LLM server loopguard forwards to.
type upstream struct {
	client *fasthttp.HostClient
	// host is the Host header sent upstream.
	host string
	// prefix is the base URL's path with a trailing "/v1" removed; v1 is true
	// when the base URL ended with "/v1".
	prefix string
	v1     bool
	addr   string
	conns  connRegistry
	idle   time.Duration
}

func newUpstream(cfg UpstreamConfig) (*upstream, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("upstream.url: %w", err)
	}
	up := &upstream{host: u.Host, idle: cfg.IdleTimeout}
	up.prefix = strings.TrimRight(u.Path, "/")
	if strings.HasSuffix(up.prefix, "/v1") {
		up.prefix, up.v1 = strings.TrimSuffix(up.prefix, "/v1"), true
	}
	isTLS := u.Scheme == "https"
	up.addr = u.Host
	if u.Port() == "" {
		if isTLS {
			up.addr += ":443"
		} else {
			up.addr += ":80"
		}
	}
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	up.client = &fasthttp.HostClient{
		Addr:  up.addr,
		IsTLS: isTLS,
		TLSConfig: &tls.Config{
			ServerName: u.Hostname(),
			MinVersion: tls.VersionTLS12,
		},
		Dial: func(addr string) (net.Conn, error) {
			c, err := dialer.Dial("tcp", addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return up.conns.track(c), nil
		},
		MaxConns:            cfg.MaxConns,
		MaxConnWaitTimeout:  cfg.ConnectTimeout,
		MaxIdleConnDuration: cfg.MaxIdleConnDuration,
		// ReadTimeout is armed once before the response headers are read; the
		// body is then governed by our own per-read idle deadline (see
		// idleReader), because with StreamResponseBody a fasthttp ReadTimeout
		// would cap the whole stream.
		ReadTimeout:                   cfg.HeaderTimeout,
		WriteTimeout:                  cfg.HeaderTimeout,
		StreamResponseBody:            true,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		MaxResponseBodySize:           0,
		ReadBufferSize:                8 << 10, // response headers; held per open stream
		RetryIfErr:                    retryIfStale,
	}
	return up, nil
}

// retryIfStale retries a request only when a pooled connection turned out to
// be closed by the upstream before it answered anything: a POST that reached
// the model must not be generated twice (proxy-notes P7).
func retryIfStale(_ *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	if attempts > 2 {
		return false, false
	}
	return false, errors.Is(err, fasthttp.ErrConnectionClosed)
}

// path joins the client's request path onto the upstream base URL without
// doubling /v1: base ".../v1" + "/v1/chat/completions" -> ".../v1/chat/completions".
func (up *upstream) path(dst []byte, reqPath []byte) []byte {
	dst = append(dst, up.prefix...)
	if up.v1 && !(hasPrefixBytes(reqPath, "/v1/") || string(reqPath) == "/v1") {
		dst = append(dst, "/v1"...)
	}
	return append(dst, reqPath...)
}

func hasPrefixBytes(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// dialError marks a failure to reach the upstream at all (502), as opposed to
// a timeout (504) or a failure after connecting.
type dialError struct{ error }

func (e *dialError) Unwrap() error { return e.error }

// connRegistry finds the upstream net.Conn behind a response, so the idle
// deadline of a streamed body can be moved after fasthttp has handed it over.
// Entries are keyed by local address, which is unique among open connections.
type connRegistry struct{ m sync.Map }

type trackedConn struct {
	net.Conn
	reg *connRegistry
	key string
}

func (r *connRegistry) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, reg: r, key: c.LocalAddr().String()}
	r.m.Store(tc.key, tc)
	return tc
}

func (r *connRegistry) lookup(local net.Addr) *trackedConn {
	if local == nil {
		return nil
	}
	v, ok := r.m.Load(local.String())
	if !ok {
		return nil
	}
	return v.(*trackedConn)
}

func (c *trackedConn) Close() error {
	c.reg.m.CompareAndDelete(c.key, c)
	return c.Conn.Close()
}

// bodyReader reads a streamed upstream body, renewing the idle deadline before
// every read and turning a missed deadline into errIdle.
type bodyReader struct {
	r    io.Reader
	conn *trackedConn
	idle time.Duration
}

var (
	errIdle       = errors.New("upstream idle timeout")
	errClientGone = errors.New("client disconnected")
	errCut        = errors.New("stream cut by loopguard")
	errDeadline   = errors.New("request timeout")
)

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.conn != nil && b.idle > 0 {
		_ = b.conn.SetReadDeadline(time.Now().Add(b.idle))
	}
	n, err := b.r.Read(p)
	if err != nil && isTimeout(err) {
		err = errIdle
	}
	return n, err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// closeStream ends an upstream body stream. A nil cause after the body was
// read to its end returns the connection to the pool; any other cause closes
// it, which is what makes vLLM and llama.cpp stop generating (proxy-notes P6).
func closeStream(resp *fasthttp.Response, cause error) {
	if rc, ok := resp.BodyStream().(fasthttp.ReadCloserWithError); ok {
		_ = rc.CloseWithError(cause)
	}
}
