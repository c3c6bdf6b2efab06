package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loopguard/loopguard/internal/rawsock"
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
	// noV1: the upstream's API has no /v1 (the ChatGPT Codex backend,
	// chatGPTCodexPath); a client's /v1/responses goes to <prefix>/responses.
	noV1 bool
	addr string
	// dial connects to the upstream's address: directly, or for an
	// intercepted host the way the agent's connection would have gone.
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	conns connRegistry
	idle  time.Duration
	// noResume is set once the upstream answered 404 or 405 to the DELETE
	// that stops a cut resumable stream: it is not llama-server (or an old
	// one) and is not asked again (resumable.go).
	noResume atomic.Bool
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
	up.noV1 = strings.HasSuffix(up.prefix, chatGPTCodexPath)
	isTLS := u.Scheme == "https"
	up.addr = u.Host
	if u.Port() == "" {
		if isTLS {
			up.addr += ":443"
		} else {
			up.addr += ":80"
		}
	}
	up.dial = (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	up.client = &fasthttp.HostClient{
		Addr:  up.addr,
		IsTLS: isTLS,
		TLSConfig: &tls.Config{
			ServerName: u.Hostname(),
			MinVersion: tls.VersionTLS12,
		},
		Dial: func(addr string) (net.Conn, error) {
			c, err := up.dial(context.Background(), "tcp", addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return up.conns.track(c), nil
		},
		MaxConns:            cfg.MaxConns,
		MaxConnWaitTimeout:  cfg.ConnectTimeout,
		MaxIdleConnDuration: cfg.MaxIdleConnDuration,
		// The exchange is ours (transport.go); these bound its two phases.
		// ReadTimeout is armed once before the response headers are read; the
		// body is then governed by a per-read idle deadline (upstreamBody),
		// because one deadline would cap the whole stream.
		ReadTimeout:    cfg.HeaderTimeout,
		WriteTimeout:   cfg.HeaderTimeout,
		ReadBufferSize: 4 << 10, // response headers; held per open stream
	}
	return up, nil
}

// path joins the client's request path onto the upstream base URL without
// doubling /v1: base ".../v1" + "/v1/chat/completions" -> ".../v1/chat/completions".
// Ollama serves its own API beside /v1 (http://host:11434/v1 and
// /api/chat), so an /api/ path goes beside the base's /v1, not under it.
func (up *upstream) path(dst []byte, reqPath []byte) []byte {
	dst = append(dst, up.prefix...)
	if up.noV1 {
		if hasPrefixBytes(reqPath, "/v1/") {
			reqPath = reqPath[len("/v1"):]
		} else if string(reqPath) == "/v1" {
			reqPath = reqPath[:0]
		}
	}
	if up.v1 && !(hasPrefixBytes(reqPath, "/v1/") || string(reqPath) == "/v1" || hasPrefixBytes(reqPath, "/api/")) {
		dst = append(dst, "/v1"...)
	}
	return append(dst, reqPath...)
}

// chatGPTCodexPath ends the base URL of the ChatGPT Codex backend
// (https://chatgpt.com/backend-api/codex), where Codex signed in with
// ChatGPT sends its turns: POST .../responses, no /v1. Codex must be given
// a base URL ending in /v1 (given one ending in /backend-api/codex it first
// asks for a workspace check that a proxy cannot answer), so loopguard
// keeps handing it /v1 and drops the /v1 upstream.
const chatGPTCodexPath = "/backend-api/codex"

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
	// Conn reads and writes the socket with raw system calls (rawsock):
	// one read an event, for every open stream.
	net.Conn
	reg *connRegistry
	key string
	// tcp is the socket itself, which shutdown shuts; nil for any other
	// connection.
	tcp *net.TCPConn
	// exchanges counts the requests sent on the connection; only the
	// goroutine holding it from the pool touches it.
	exchanges int
	// read counts the bytes received, to tell a failure before the first
	// response byte from one after it.
	read atomic.Int64
	// raw and peek serve peerClosed, made once per connection so that the
	// check before each reuse allocates nothing; dead is peek's answer.
	raw  syscall.RawConn
	peek func(fd uintptr)
	dead bool
	// idle is the body's idle timeout while a response body is read from
	// the connection (upstreamBody), 0 otherwise; waitFrom is when the
	// body's current read began. The read deadline is armed once an idle
	// period, not once a read (a runtime timer change per stream event). A
	// deadline that passes while the reader
	// had not waited idle long (the relay was writing to the client) is
	// moved on to waitFrom+idle and the read goes on. Only the goroutine
	// reading the body touches them.
	idle     time.Duration
	waitFrom time.Time
}

func (r *connRegistry) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: rawsock.Wrap(c), reg: r, key: c.LocalAddr().String()}
	tc.tcp, _ = c.(*net.TCPConn)
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			tc.raw = raw
			tc.peek = func(fd uintptr) {
				// Bytes, FIN or an error: all but nothing yet.
				_, errno := rawsock.Peek(fd)
				tc.dead = errno != syscall.EAGAIN && errno != syscall.EINTR
			}
		}
	}
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

func (c *trackedConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		c.read.Add(int64(n))
		if err == nil || err == rawsock.ErrWouldBlock || c.idle == 0 || !isTimeout(err) {
			return n, err
		}
		due := c.waitFrom.Add(c.idle)
		if !time.Now().Before(due) {
			return n, err
		}
		// A timed-out read consumed nothing: it is safe to read again.
		_ = c.Conn.SetReadDeadline(due)
		if n > 0 {
			return n, nil
		}
	}
}

// armIdle starts the body's idle timeout; disarmIdle ends it before the
// connection goes back to the pool.
func (c *trackedConn) armIdle(d time.Duration) {
	c.idle, c.waitFrom = d, time.Now()
	_ = c.Conn.SetReadDeadline(c.waitFrom.Add(d))
}

func (c *trackedConn) disarmIdle() {
	c.idle = 0
	_ = c.Conn.SetReadDeadline(time.Time{})
}

// shutdown ends both directions of the socket without closing it: the
// upstream sees the connection end (FIN), and a read that waits on it
// returns. Unlike Close, it never waits for a read or write that runs
// (shutdown(2) takes no lock of the socket's), so any goroutine may call
// it while the reader is busy elsewhere.
func (c *trackedConn) shutdown() {
	if c.tcp != nil {
		_ = c.tcp.CloseRead()
		_ = c.tcp.CloseWrite()
	}
}

func (c *trackedConn) Close() error {
	c.reg.m.CompareAndDelete(c.key, c)
	return c.Conn.Close()
}

var (
	errIdle       = errors.New("upstream idle timeout")
	errClientGone = errors.New("client disconnected")
	errCut        = errors.New("stream cut by loopguard")
	errDeadline   = errors.New("request timeout")
	// errUnsolicitedUpgrade: the upstream answered 101, which nothing asked for.
	errUnsolicitedUpgrade = errors.New("upstream switched protocols unasked")
)

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
