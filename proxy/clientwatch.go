package proxy

import (
	"net"
	"syscall"
	"time"
)

// watchPeerClose calls onClose as soon as the client closes its side of conn,
// and returns a stop function that ends the watch and waits for it.
//
// fasthttp reports a vanished client only as a failed write, and the first
// write after the peer left can still succeed (fasthttp #771): while the
// upstream is silent (prompt processing) nothing is written, so nothing would
// be noticed and the GPU would keep generating for nobody. The watcher instead
// waits in the netpoller for the socket to become readable and peeks at it
// (MSG_PEEK, so no byte of a pipelined request is consumed): a zero-byte read
// is the client's FIN.
//
// Connections that are not plain sockets (TLS, in-memory listeners) are not
// watched; write errors still end their streams.
func watchPeerClose(conn net.Conn, onClose func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	// fasthttp's request read deadline may still be armed; a stream can
	// outlive it, so the watch runs without one.
	_ = conn.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		defer close(done)
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
	return func() {
		// A past deadline wakes the parked Read; then clear it for fasthttp,
		// which sets its own before reading the next request.
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = conn.SetReadDeadline(time.Time{})
	}
}
