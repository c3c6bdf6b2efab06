//go:build unix && !linux

package rawsock

import (
	"net"
	"syscall"
)

// Wrap returns c: raw system calls are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }

// WriteBuffers writes all of v to c and consumes it: v.WriteTo(c).
func WriteBuffers(c net.Conn, v *net.Buffers) (int64, error) { return v.WriteTo(c) }

// Peek looks at what the socket fd holds, without taking it or waiting
// (recv of one byte, MSG_PEEK|MSG_DONTWAIT): n is 1 when bytes wait, and 0
// with errno 0 once the peer has closed; errno is EAGAIN when nothing came.
func Peek(fd uintptr) (n int, errno syscall.Errno) {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err != nil {
		errno, _ = err.(syscall.Errno)
		return 0, errno
	}
	return n, 0
}
