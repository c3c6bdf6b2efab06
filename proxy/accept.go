package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/rs/zerolog"
)

// acceptor is the listener the Server serves from: it reads and writes
// each client's socket with raw system calls (rawsock says why: a read and
// a write an event, for every open stream), and keeps the connections it
// accepted, so that those still open when a shutdown's grace is over can
// be closed (CloseConnections).
type acceptor struct {
	net.Listener
	conns *connSet
	// sendTimeout bounds each wait of a write to a client
	// (server.send_timeout).
	sendTimeout time.Duration
	log         zerolog.Logger
	budget      *bodyBudget
}

// connSet is the set of a Server's open client connections.
type connSet struct {
	mu   sync.Mutex
	open map[*clientConn]struct{}
}

// Accept waits out the errors that say the process or the system is short
// of something for now (descriptors, buffers, memory) or that one
// connection died in the queue, as Go's net/http and nginx do: fasthttp
// takes any error but a timeout as the listener's end, and its Serve would
// return, taking the proxy down on a burst of connections. Connections
// already open are served all the while; new ones wait in the listen
// queue. The wait doubles from 5ms up to 1s, and ends when the listener
// is closed.
func (l *acceptor) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return l.track(c), nil
		}
		if !acceptRetryable(err) {
			return nil, err
		}
		if delay == 0 {
			delay = 5 * time.Millisecond
			l.log.Warn().Err(err).Msg("cannot accept connections for now; retrying")
		} else if delay *= 2; delay > time.Second {
			delay = time.Second
		}
		time.Sleep(delay)
	}
}

// acceptRetryable reports an accept error that passes: a shortage of
// descriptors, buffers or memory, or a connection aborted in the queue.
func acceptRetryable(err error) bool {
	for _, e := range [...]error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// track wraps c, a new client connection, and keeps it in the set.
func (l *acceptor) track(c net.Conn) net.Conn {
	cc := &clientConn{Conn: limitSends(rawsock.Wrap(c), l.sendTimeout), conns: l.conns, budget: l.budget}
	if hc, ok := c.(hostConn); ok {
		cc.host = hc.Host()
	}
	l.conns.mu.Lock()
	if l.conns.open == nil {
		l.conns.open = map[*clientConn]struct{}{}
	}
	l.conns.open[cc] = struct{}{}
	l.conns.mu.Unlock()
	return cc
}

// clientConn leaves its set when closed, and gives back what it holds of
// the request body budget.
type clientConn struct {
	net.Conn
	conns *connSet
	// budget is the server's body budget; reserved is the share the
	// connection's current request holds (budget.go), refused says that
	// its request did not fit. reserved is given back by whoever ends
	// first: the request, or Close from another goroutine.
	budget   *bodyBudget
	reserved atomic.Int64
	refused  bool
	// host is the host:port an intercepted connection was meant for
	// (intercepted.go); "" for a connection to loopguard itself.
	host string
}

// SyscallConn shows the socket under c: the peer watcher finds through it
// a client that left while the upstream was silent.
func (c *clientConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNotSocket
	}
	return sc.SyscallConn()
}

var errNotSocket = errors.New("not a socket")

func (c *clientConn) Close() error {
	c.giveBack()
	c.conns.mu.Lock()
	delete(c.conns.open, c)
	c.conns.mu.Unlock()
	return c.Conn.Close()
}

// CloseConnections closes every client connection still open and returns
// how many there were: after Shutdown, once the grace an orchestrator
// allows is over (Shutdown waits for running streams without end).
func (s *Server) CloseConnections() int {
	s.clients.mu.Lock()
	open := make([]*clientConn, 0, len(s.clients.open))
	for c := range s.clients.open {
		open = append(open, c)
	}
	s.clients.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
	return len(open)
}
