package proxy

import (
	"net"
	"testing"

	"github.com/loopguard/loopguard/internal/rawsock"
)

// TestStreamSocket: a stream goes to the client's socket itself, which
// writes the header, a chunk's size line, data and CRLF in one sendmsg; a
// connection that is not a socket gets a wrapper.
func TestStreamSocket(t *testing.T) {
	_, accepted := tcpPair(t)
	sock := rawsock.Wrap(accepted)
	if got := streamSocket(&clientConn{Conn: sock}); got != sock.(buffersWriter) {
		t.Errorf("chunks go to %T; want the socket", got)
	}
	pipe, other := net.Pipe()
	defer pipe.Close()
	defer other.Close()
	if got := streamSocket(pipe); got != (connBuffers{pipe}) {
		t.Errorf("chunks to a pipe go to %T; want connBuffers", got)
	}
}
