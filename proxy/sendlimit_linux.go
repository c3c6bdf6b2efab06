package proxy

import (
	"net"
	"time"

	"github.com/loopguard/loopguard/internal/rawsock"
)

// limitSends bounds how long a write to c, a client's connection, waits
// for the client to take bytes (server.send_timeout); d 0: no bound. A
// raw socket arms its deadline only when a write has to wait
// (rawsock.Conn.SetWriteStall), so the healthy path pays nothing; any
// other connection (in-memory, TLS) sets one before every write.
func limitSends(c net.Conn, d time.Duration) net.Conn {
	if d <= 0 {
		return c
	}
	if rc, ok := c.(*rawsock.Conn); ok {
		rc.SetWriteStall(d)
		return rc
	}
	return &sendDeadlineConn{Conn: c, d: d}
}
