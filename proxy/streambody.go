package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"

	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/valyala/fasthttp"
)

// setBodyWriter makes write the writer of a response body of unknown
// length, sent chunked, on the server's own goroutine.
//
// fasthttp's SetBodyStreamWriter runs the writer on a goroutine of its own
// and pipes it to the connection's through a 4 KiB buffered writer, a pipe
// and a 4 KiB copy buffer: about 16 KiB and a goroutine for every open
// stream. A body that implements fasthttp.BodyWriterTo is instead written by
// the connection's goroutine, each Write framed as one chunk and flushed at
// once. write's Flush after every event is what sends it, as before.
func setBodyWriter(ctx *fasthttp.RequestCtx, write func(w *bufio.Writer)) *streamBody {
	conn := ctx.Conn()
	if cc, ok := conn.(*clientConn); ok {
		conn = cc.Conn // one gathering write reaches the socket (rawsock) only unwrapped
	}
	// The socket itself writes buffers (rawsock.Conn), one sendmsg a chunk.
	bw, ok := conn.(buffersWriter)
	if !ok {
		bw = connBuffers{conn}
	}
	b := &streamBody{write: write, cw: chunkWriter{conn: bw}}
	ctx.Response.SetBodyStream(b, -1)
	return b
}

// streamBodyBuf is the writer's own buffer. An event larger than it goes to
// the connection in one Write, uncopied (bufio writes through when it is
// empty, and the relay flushes after every event); a smaller one (a
// keep-alive comment) is copied and sent by the Flush that follows it. Every
// open stream holds it, so it is small.
const streamBodyBuf = 64

type streamBody struct {
	write func(w *bufio.Writer)
	cw    chunkWriter // the writer's; part of the body, which lives as long
}

var errStreamBodyRead = errors.New("proxy: a stream body is written, not read")

func (b *streamBody) Read([]byte) (int, error) { return 0, errStreamBodyRead }

// SupportsBodyWriteTo tells fasthttp that WriteTo replaces Read.
func (b *streamBody) SupportsBodyWriteTo() bool { return true }

func (b *streamBody) WriteTo(w io.Writer) (int64, error) {
	b.cw.chunks = w
	bw := bufio.NewWriterSize(&b.cw, streamBodyBuf)
	b.write(bw)
	return 0, bw.Flush()
}

// chunkWriter writes each Write as one chunk. The first goes through
// fasthttp's writer (chunks), which sends the response header with it; from
// then on fasthttp's write buffer is empty (it flushes every chunk), and a
// chunk goes to the connection in one gathering write (sendmsg) of its size
// line, its data and its CRLF, without fasthttp's writer, its buffer and its
// flush between, and without a copy. A chunk larger than a burst (batchMax)
// still goes through fasthttp's writer, which sends it in two or three
// writes.
type chunkWriter struct {
	chunks io.Writer     // fasthttp's: a chunk a Write, flushed
	conn   buffersWriter // the client's connection, under fasthttp's write buffer
	sent   bool          // a chunk went through chunks
	// A chunk's parts while it is written; here, as a local would be
	// allocated every chunk.
	size [chunkFraming]byte
	iov  [3][]byte
	out  net.Buffers
}

// buffersWriter writes all of v in one system call where it can, and
// consumes it.
type buffersWriter interface {
	WriteBuffers(v *net.Buffers) (int64, error)
}

// connBuffers writes buffers to a connection with rawsock.WriteBuffers.
type connBuffers struct{ net.Conn }

func (c connBuffers) WriteBuffers(v *net.Buffers) (int64, error) {
	return rawsock.WriteBuffers(c.Conn, v)
}

// chunkFraming is the most a chunk's framing takes: a size line of up to
// 8 hex digits and its CRLF, and the CRLF after the data.
const chunkFraming = 8 + 2 + 2

func (c *chunkWriter) Write(p []byte) (int, error) {
	if !c.sent || len(p) > batchMax {
		n, err := c.chunks.Write(p)
		c.sent = c.sent || err == nil
		return n, err
	}
	size := append(strconv.AppendInt(c.size[:0], int64(len(p)), 16), "\r\n"...)
	c.iov = [3][]byte{size, p, crlf}
	c.out = c.iov[:]
	_, err := c.conn.WriteBuffers(&c.out)
	c.iov, c.out = [3][]byte{}, nil // the stream must not keep the event
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

var crlf = []byte("\r\n")

var _ fasthttp.BodyWriterTo = (*streamBody)(nil)
