package rawsock

import (
	"net"
	"syscall"
)

// Wrap returns c: raw system calls are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }

// WriteBuffers writes all of v to c and consumes it: v.WriteTo(c).
func WriteBuffers(c net.Conn, v *net.Buffers) (int64, error) { return v.WriteTo(c) }

// Peek reports that nothing came (EAGAIN), whatever the socket holds:
// Windows has no non-blocking peek (Winsock knows no MSG_DONTWAIT, and Go's
// sockets there are not in non-blocking mode), so a closed peer is found by
// the next read or write instead.
func Peek(fd uintptr) (n int, errno syscall.Errno) {
	return 0, syscall.EAGAIN
}
