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
	pace        bodyPace
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
	cc := &clientConn{Conn: limitSends(rawsock.Wrap(c), l.sendTimeout), conns: l.conns, pace: l.pace}
	cc.share.budget = l.budget
	cc.tcp, _ = c.(*net.TCPConn)
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
	// tcp is the socket under Conn, for a lingering close; nil if none.
	tcp *net.TCPConn
	// host is the host:port an intercepted connection was meant for
	// (intercepted.go); "" for a connection to loopguard itself.
	host string
	// share is what the connection's current request holds of the body
	// budget (budget.go), given back by whoever ends first: the request,
	// or Close from another goroutine. refused says that its body did not
	// fit; body is the body being read, paced by pace.
	share   budgetShare
	refused bool
	body    bodyRead
	pace    bodyPace
	// lingering asks Close to read what the client still sends after a
	// refused body before it closes (linger).
	lingering atomic.Bool
	// peer is the client watch's registration of the socket
	// (clientwatch_linux.go), guarded by the watcher's lock.
	peer peerReg
	// ahead holds bytes read ahead of what was asked (readSocket), in a buffer
	// of readAheads.
	ahead    []byte
	aheadBuf *[]byte
	// take and put are takeAhead and putAhead, made once per connection.
	take func() []byte
	put  func([]byte)
	// idleNext, once a stream gave the connection back (serveAgain), is
	// the wait for the next request, which fasthttp would time as a new
	// connection's first request (SetReadDeadline); resumed says that no
	// byte of that request came yet (closeResumed).
	idleNext time.Duration
	resumed  atomic.Bool
	// orphan is a stream whose connection fasthttp has yet to hand over
	// (setStreamWriter); Close starts it if fasthttp closes the connection
	// instead.
	orphan atomic.Pointer[handOver]
}

// aheadReader reads more than it is asked for (rawsock.Conn, on Linux).
type aheadReader interface {
	ReadAhead(p []byte, get func() []byte, put func([]byte)) (int, []byte, error)
}

// readAheadBelow: a Read of fewer bytes reads ahead. fasthttp reads one
// byte of a kept-alive connection's next request, and only then takes a
// buffer for the rest (server.ReduceMemoryUsage keeps an idle connection
// free of one): two reads a request, where a read ahead makes one.
const readAheadBelow = 64

// readAheads are the buffers of read-ahead bytes: those of a request's
// headers and start, which fasthttp takes at once.
var readAheads = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}

// readSocket reads as the connection's socket does, but a small read reads
// ahead (readAheadBelow), and hands the bytes it did not return to the next
// reads. It is called by the connection's goroutine only (Read).
func (c *clientConn) readSocket(p []byte) (int, error) {
	if c.resumed.Load() {
		defer c.resumed.Store(false)
	}
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		if c.ahead = c.ahead[n:]; len(c.ahead) == 0 {
			c.releaseAhead()
		}
		return n, nil
	}
	ar, ok := c.Conn.(aheadReader)
	if !ok || len(p) >= readAheadBelow {
		return c.Conn.Read(p)
	}
	if c.take == nil {
		c.take, c.put = c.takeAhead, c.putAhead
	}
	n, rest, err := ar.ReadAhead(p, c.take, c.put)
	c.ahead = rest
	if rest == nil {
		c.aheadBuf = nil // given back by ReadAhead
	}
	return n, err
}

// takeAhead and putAhead are ReadAhead's buffer source: a buffer of
// readAheads, kept in aheadBuf while it holds bytes.
func (c *clientConn) takeAhead() []byte {
	c.aheadBuf = readAheads.Get().(*[]byte)
	return *c.aheadBuf
}

func (c *clientConn) putAhead([]byte) { c.releaseAhead() }

// unread puts p, bytes read off the socket that a reader gave back, before
// what c has yet to return.
func (c *clientConn) unread(p []byte) {
	b := append(append(make([]byte, 0, len(p)+len(c.ahead)), p...), c.ahead...)
	c.releaseAhead()
	c.ahead = b
}

func (c *clientConn) releaseAhead() {
	if c.aheadBuf != nil {
		readAheads.Put(c.aheadBuf)
		c.aheadBuf, c.ahead = nil, nil
	}
}

// peerReg is a client connection's lasting registration with the client
// watch: gen names it in the watch's events (0: not registered), hup says
// that the client hung up while none of its requests was watched.
type peerReg struct {
	gen uint32
	hup bool
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
	if h := c.orphan.Swap(nil); h != nil {
		h.start(c, false) // on a closed connection: it ends as a client gone
	}
	c.share.giveBack()
	c.conns.mu.Lock()
	delete(c.conns.open, c)
	c.conns.mu.Unlock()
	if c.lingering.Swap(false) && c.tcp != nil {
		linger(c.tcp)
	}
	return c.Conn.Close()
}

// closeResumed closes the connections that a stream gave back to fasthttp
// and that wait for their next request (serveAgain).
func (cs *connSet) closeResumed() {
	cs.mu.Lock()
	var idle []*clientConn
	for c := range cs.open {
		if c.resumed.Load() {
			idle = append(idle, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range idle {
		_ = c.Close()
	}
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
		c.lingering.Store(false)
		_ = c.Close()
	}
	return len(open)
}
