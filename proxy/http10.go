package proxy

import (
	"bufio"
	"net"

	"github.com/valyala/fasthttp"
)

// setStreamWriter makes write the writer of the response body, whose length
// is not known in advance. HTTP/1.1 clients get it chunked. HTTP/1.0 has no
// chunked coding, yet fasthttp would use it, so an HTTP/1.0 client gets the
// body delimited by the close of the connection (RFC 9112 section 6.3):
// loopguard takes the connection over once the handler returns, writes the
// header itself, without a length and with "Connection: close", then runs
// write, and fasthttp closes the connection after it.
//
// fasthttp no longer counts a connection it handed over; s.handedOver does,
// so that Shutdown waits for these streams as for the others.
func (s *Server) setStreamWriter(ctx *fasthttp.RequestCtx, write func(w *bufio.Writer)) *streamBody {
	if ctx.Request.Header.IsHTTP11() {
		return setBodyWriter(ctx, write)
	}
	// -2: no Content-Length and no Transfer-Encoding; it also sets
	// "Connection: close".
	ctx.Response.Header.SetContentLength(-2)
	head := ctx.Response.Header.AppendBytes(nil)
	ctx.HijackSetNoResponse(true)
	s.handedOver.Add(1)
	ctx.Hijack(func(c net.Conn) {
		defer s.handedOver.Done()
		w := bufio.NewWriter(c)
		// The header goes out at once, as fasthttp sends it. A failed write
		// fails write's first flush too (bufio keeps the error), which ends
		// the stream as a vanished client.
		_, _ = w.Write(head)
		_ = w.Flush()
		write(w)
		_ = w.Flush()
	})
	return nil
}
