package proxy

import (
	"net"
	"testing"

	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/valyala/fasthttp"
)

// TestChunkWriterSocket: a stream's chunks go to the client's socket
// itself, which writes a chunk's size line, data and CRLF in one sendmsg;
// a connection that is not a socket gets a wrapper.
func TestChunkWriterSocket(t *testing.T) {
	_, accepted := tcpPair(t)
	sock := rawsock.Wrap(accepted)
	var ctx fasthttp.RequestCtx
	ctx.Init2(&clientConn{Conn: sock}, nil, false)
	if b := setBodyWriter(&ctx, nil); b.cw.conn != sock.(buffersWriter) {
		t.Errorf("chunks go to %T; want the socket", b.cw.conn)
	}
	pipe, other := net.Pipe()
	defer pipe.Close()
	defer other.Close()
	ctx.Init2(pipe, nil, false)
	if b := setBodyWriter(&ctx, nil); b.cw.conn != (connBuffers{pipe}) {
		t.Errorf("chunks to a pipe go to %T; want connBuffers", b.cw.conn)
	}
}
