//go:build unix

package proxy

import (
	"net"
	"syscall"
)

// socketOf returns the socket under conn, to watch it for the client
// leaving; nil when conn is not a socket (TLS, in-memory listeners). Such
// connections are not watched: write errors still end their streams.
func socketOf(conn net.Conn) syscall.RawConn {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}
