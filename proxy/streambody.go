package proxy

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"sync"

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
func setBodyWriter(ctx *fasthttp.RequestCtx, write func(w *bufio.Writer)) {
	ctx.Response.SetBodyStream(&streamBody{write: write, cw: chunkWriter{conn: ctx.Conn()}}, -1)
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

// chunkWriter writes each Write as one chunk. fasthttp's writer (chunks)
// frames it in the server's write buffer (serverWriteBuf), which sends a
// chunk larger than that in two or three writes; a burst of events the
// relay sends together (up to batchMax) is framed here instead and goes to
// the connection in one. That is safe once a chunk went through fasthttp's
// writer: it flushed the response header with it, and its buffer has been
// empty since, as it flushes every chunk.
type chunkWriter struct {
	chunks io.Writer // fasthttp's: a chunk a Write, flushed
	conn   io.Writer // the client's connection, under fasthttp's write buffer
	sent   bool      // a chunk went through chunks
}

// chunkFraming is the most a chunk's framing takes: a size line of up to
// 8 hex digits and its CRLF, and the CRLF after the data.
const chunkFraming = 8 + 2 + 2

// frameBufs hold a burst while it is framed; a stream holds one only for
// the write.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, batchMax+chunkFraming); return &b }}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if !c.sent || len(p)+chunkFraming <= serverWriteBuf || len(p) > batchMax {
		n, err := c.chunks.Write(p)
		c.sent = c.sent || err == nil
		return n, err
	}
	buf := frameBufs.Get().(*[]byte)
	b := strconv.AppendInt((*buf)[:0], int64(len(p)), 16)
	b = append(append(append(b, "\r\n"...), p...), "\r\n"...)
	_, err := c.conn.Write(b)
	frameBufs.Put(buf)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

var _ fasthttp.BodyWriterTo = (*streamBody)(nil)
