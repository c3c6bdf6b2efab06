//go:build !linux

package proxy

import (
	"net"
	"time"
)

// limitSends bounds how long a write to c, a client's connection, waits
// for the client to take bytes (server.send_timeout); d 0: no bound.
// Without raw sockets, a deadline is set before every write.
func limitSends(c net.Conn, d time.Duration) net.Conn {
	if d <= 0 {
		return c
	}
	return &sendDeadlineConn{Conn: c, d: d}
}
