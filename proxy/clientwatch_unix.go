//go:build unix && !linux

package proxy

import (
	"net"
	"syscall"
	"time"
)

// peerWatcher calls a connection's onClose as soon as the client closes its
// side of it (see clientwatch_linux.go for why). Without epoll, each watch
// parks a goroutine of its own in the netpoller until the socket is
// readable, then peeks at it (MSG_PEEK: a pipelined request stays for
// fasthttp): a zero-byte read is the client's FIN.
type peerWatcher struct{}

// peerWatch is one watched connection.
type peerWatch struct {
	conn net.Conn
	done chan struct{}
}

// watch starts watching conn; nil, watching nothing, for a connection that
// is not a socket. The caller must call stop before conn can be closed or
// read again.
func (*peerWatcher) watch(conn net.Conn, onClose func()) *peerWatch {
	raw := socketOf(conn)
	if raw == nil {
		return nil
	}
	// fasthttp's request read deadline may still be armed; a stream can
	// outlive it, so the watch runs without one.
	_ = conn.SetReadDeadline(time.Time{})
	p := &peerWatch{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var buf [1]byte
		closed := false
		_ = raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EAGAIN || err == syscall.EINTR:
				return false // not readable yet: park in the netpoller
			case err != nil || n == 0:
				closed = true // FIN or RST
			}
			// n > 0: the client sent more (pipelining); stop watching.
			return true
		})
		if closed {
			onClose()
		}
	}()
	return p
}

// stop ends the watch and returns once onClose is not running.
func (p *peerWatch) stop() {
	if p == nil {
		return
	}
	// A past deadline wakes the parked Read; then clear it for fasthttp,
	// which sets its own before reading the next request.
	_ = p.conn.SetReadDeadline(time.Unix(1, 0))
	<-p.done
	_ = p.conn.SetReadDeadline(time.Time{})
}

// close does nothing: each watch's goroutine ends with its stop.
func (*peerWatcher) close() {}
