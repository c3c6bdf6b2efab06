package proxy

import (
	"bufio"
	"errors"
	"io"

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
	ctx.Response.SetBodyStream(&streamBody{write: write}, -1)
}

// streamBodyBuf is the writer's own buffer. An event larger than it goes to
// the connection in one Write (bufio writes through when it is empty); a
// smaller one is copied and sent by the Flush that follows it.
const streamBodyBuf = 512

type streamBody struct {
	write func(w *bufio.Writer)
}

var errStreamBodyRead = errors.New("proxy: a stream body is written, not read")

func (b *streamBody) Read([]byte) (int, error) { return 0, errStreamBodyRead }

// SupportsBodyWriteTo tells fasthttp that WriteTo replaces Read.
func (b *streamBody) SupportsBodyWriteTo() bool { return true }

func (b *streamBody) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, streamBodyBuf)
	b.write(bw)
	return 0, bw.Flush()
}

var _ fasthttp.BodyWriterTo = (*streamBody)(nil)
