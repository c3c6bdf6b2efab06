//go:build !linux

package rawsock

import "net"

// Wrap returns c: raw system calls are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }

// WriteBuffers writes all of v to c and consumes it: v.WriteTo(c).
func WriteBuffers(c net.Conn, v *net.Buffers) (int64, error) { return v.WriteTo(c) }
