package proxy

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/loopguard/loopguard/internal/rawsock"
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
}

// connSet is the set of a Server's open client connections.
type connSet struct {
	mu   sync.Mutex
	open map[*clientConn]struct{}
}

func (l *acceptor) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &clientConn{Conn: limitSends(rawsock.Wrap(c), l.sendTimeout), conns: l.conns}
	l.conns.mu.Lock()
	if l.conns.open == nil {
		l.conns.open = map[*clientConn]struct{}{}
	}
	l.conns.open[cc] = struct{}{}
	l.conns.mu.Unlock()
	return cc, nil
}

// clientConn leaves its set when closed.
type clientConn struct {
	net.Conn
	conns *connSet
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
