package proxy

import (
	"net"
	"syscall"
	"time"
)

// sendDeadlineConn bounds each of its writes by d with a write deadline.
type sendDeadlineConn struct {
	net.Conn
	d time.Duration
}

func (c *sendDeadlineConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.d))
	return c.Conn.Write(p)
}

// SyscallConn shows the socket under c, for the peer watcher.
func (c *sendDeadlineConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNotSocket
	}
	return sc.SyscallConn()
}
