package proxy

import "net"

// peerWatcher watches nothing on Windows: a socket there cannot be peeked at
// without waiting (no MSG_DONTWAIT), and a read parked on it would take the
// bytes of a pipelined request from fasthttp. A client that leaves while its
// stream is quiet is found at the stream's next write.
type peerWatcher struct{}

// peerWatch is one watched connection; never made on Windows.
type peerWatch struct{}

// watch returns nil: nothing is watched.
func (*peerWatcher) watch(net.Conn, func()) *peerWatch { return nil }

// stop does nothing.
func (*peerWatch) stop() {}

// close does nothing.
func (*peerWatcher) close() {}
