package proxy

import (
	"bufio"
	"net"
	"reflect"
	"strconv"

	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/valyala/fasthttp"
)

// setStreamWriter makes write the writer of the response body, whose length
// is not known in advance, and runs it once the handler has returned, on a
// goroutine of the stream's own: fasthttp hands the connection over
// (Hijack), and loopguard writes the header and the body itself.
//
// An open stream then holds only what its relay needs: no fasthttp
// connection goroutine parked under the relay with its stack (a stream
// waits with the detectors' deepest calls on top of its frames, and the
// stack keeps the size that made), and no fasthttp write buffer
// (docs/streams.md: thousands of open streams).
//
// HTTP/1.1 clients get the body chunked, each Write one chunk, and the
// connection goes back to fasthttp after the last chunk (serveAgain), as a
// kept-alive connection does after any answer. HTTP/1.0 has no chunked
// coding: the body is delimited by the close of the connection (RFC 9112
// section 6.3), with "Connection: close" and no length.
//
// fasthttp no longer counts a connection it handed over; s.handedOver does,
// so that Shutdown waits for these streams as for the others.
func (s *Server) setStreamWriter(ctx *fasthttp.RequestCtx, write func(w *bufio.Writer)) {
	chunked := ctx.Request.Header.IsHTTP11()
	// What fasthttp decides when it writes a response itself: the
	// connection closes after it if either side asked, or once a shutdown
	// began.
	keep := chunked && !ctx.Request.Header.ConnectionClose() && !ctx.Response.Header.ConnectionClose() &&
		s.stopping.Err() == nil
	if chunked {
		ctx.Response.Header.SetContentLength(-1) // Transfer-Encoding: chunked
		if !keep {
			ctx.Response.Header.SetConnectionClose()
		}
	} else {
		// -2: no Content-Length and no Transfer-Encoding; it also sets
		// "Connection: close".
		ctx.Response.Header.SetContentLength(-2)
	}
	b := &streamBody{head: ctx.Response.Header.AppendBytes(nil), chunked: chunked, conn: streamSocket(ctx.Conn())}
	ctx.HijackSetNoResponse(true)
	s.handedOver.Add(1)
	// fasthttp keeps the request's context until the handler it hands the
	// connection to returns: the stream runs on a goroutine of its own, so
	// that an open stream holds none of it.
	start := func(c net.Conn, keep bool) { go s.runStream(c, b, write, keep) }
	cc, _ := ctx.Conn().(*clientConn)
	if cc == nil {
		ctx.Hijack(func(c net.Conn) { start(c, keep) })
		return
	}
	// fasthttp closes the connection without handing it over when it
	// cannot (a pipelined answer before this one that no longer reaches
	// the client, a socket already closed): the stream then runs as one
	// whose client left, which ends it upstream and accounts for it.
	h := &handOver{start: start}
	cc.orphan.Store(h)
	ctx.Hijack(func(c net.Conn) {
		if cc.orphan.CompareAndSwap(h, nil) {
			start(c, keep)
		}
	})
}

// handOver is a stream waiting for fasthttp to hand its connection over;
// whoever takes it from the connection (clientConn.orphan) starts it.
type handOver struct{ start func(c net.Conn, keep bool) }

// runStream writes the stream to c, then gives c back to fasthttp or closes
// it.
func (s *Server) runStream(c net.Conn, b *streamBody, write func(w *bufio.Writer), keep bool) {
	ok := s.writeStream(b, write)
	s.handedOver.Done() // the stream is over; fasthttp counts what follows
	if !ok || !keep {
		_ = c.Close()
		return
	}
	s.serveAgain(c)
}

// writeStream runs write into b and ends the body; false when the
// connection cannot carry another request (a write failed, or write
// panicked). A panic outside the observer's stages, which recover on their
// own (failsafe.go), ends the stream where it stood, as fasthttp did when
// it ran the writer.
func (s *Server) writeStream(b *streamBody, write func(w *bufio.Writer)) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			s.recovered(nil, "relay", r)
			ok = false
		}
	}()
	w := bufio.NewWriterSize(b, streamBodyBuf)
	write(w)
	return w.Flush() == nil && b.end() == nil
}

// serveAgain gives c, a kept-alive connection whose stream is over, back to
// fasthttp for its next request, on a goroutine of its own: the wait for
// that request does not keep the stack the stream grew.
//
// fasthttp counts a connection it serves as idle only 5 s after ServeConn
// took it, and a shutdown waits for it until then: the connection says it
// waits for its next request (clientConn.resumed), and Shutdown closes it
// at once, as fasthttp closes its own idle connections. A shutdown that
// began during the stream closes it here.
func (s *Server) serveAgain(c net.Conn) {
	under := underlying(c)
	cc, ok := under.(*clientConn)
	if !ok {
		if s.stopping.Err() != nil {
			_ = c.Close()
			return
		}
		go func() { _ = s.http.ServeConn(c) }()
		return
	}
	// Bytes fasthttp had read beyond the request (a pipelined next
	// request) are read first.
	if rest := pipelined(c); len(rest) > 0 {
		cc.unread(rest)
	} else {
		cc.resumed.Store(true)
	}
	// The wait for the next request is an idle connection's, not a
	// request's (ServeConn times a connection's first read as a request).
	cc.idleNext = s.cfg.Server.IdleTimeout
	if s.stopping.Err() != nil {
		_ = cc.Close()
		return
	}
	go func() { _ = s.http.ServeConn(cc) }()
}

// pipelined returns the bytes fasthttp had read of c's connection beyond
// the request whose answer took it over: its hijacked connection reads
// them from the request's reader, which it keeps only when it holds such
// bytes. fasthttp does not export either; the field is read by name
// (fasthttp v1.74), and TestStreamConnectionGoesOn fails if it goes.
func pipelined(c net.Conn) []byte {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	r := v.Elem().FieldByName("r")
	if !r.IsValid() || r.Kind() != reflect.Interface || r.IsNil() || r.Elem().Type() != reflect.TypeFor[*bufio.Reader]() {
		return nil
	}
	br := (*bufio.Reader)(r.Elem().UnsafePointer())
	rest, _ := br.Peek(br.Buffered())
	return rest
}

// streamBodyBuf is the writer's own buffer. An event larger than it goes to
// the connection in one Write, uncopied (bufio writes through when it is
// empty, and the relay flushes after every event); a smaller one (a
// keep-alive comment) is copied and sent by the Flush that follows it. Every
// open stream holds it, so it is small.
const streamBodyBuf = 64

// streamBody is a streamed answer's way to the client: the response header
// with the first Write, then each Write as one chunk (or as it is, for
// HTTP/1.0), in one gathering write (sendmsg) of the header, the chunk's
// size line, its data and its CRLF, without a copy.
type streamBody struct {
	conn    buffersWriter
	head    []byte // the response header, until a write sends it
	chunked bool
	// A write's parts while it is written; here, as a local would be
	// allocated every write.
	size [chunkFraming]byte
	iov  [4][]byte
	out  net.Buffers
}

// buffersWriter writes all of v in one system call where it can, and
// consumes it.
type buffersWriter interface {
	WriteBuffers(v *net.Buffers) (int64, error)
}

// streamSocket is where a stream to conn is written: the client's socket
// itself (rawsock.Conn) when it is one, which writes buffers in one
// sendmsg.
func streamSocket(conn net.Conn) buffersWriter {
	if cc, ok := conn.(*clientConn); ok {
		conn = cc.Conn
	}
	if bw, ok := conn.(buffersWriter); ok {
		return bw
	}
	return connBuffers{conn}
}

// connBuffers writes buffers to a connection with rawsock.WriteBuffers.
type connBuffers struct{ net.Conn }

func (c connBuffers) WriteBuffers(v *net.Buffers) (int64, error) {
	return rawsock.WriteBuffers(c.Conn, v)
}

// chunkFraming is the most a chunk's framing takes: a size line of up to
// 8 hex digits and its CRLF, and the CRLF after the data.
const chunkFraming = 8 + 2 + 2

func (b *streamBody) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // an empty chunk would end the body
	}
	n := 0
	if b.head != nil {
		b.iov[n], n = b.head, n+1
	}
	if b.chunked {
		b.iov[n] = append(strconv.AppendInt(b.size[:0], int64(len(p)), 16), "\r\n"...)
		b.iov[n+1], b.iov[n+2], n = p, crlf, n+3
	} else {
		b.iov[n], n = p, n+1
	}
	if err := b.send(n); err != nil {
		return 0, err
	}
	return len(p), nil
}

// end ends the body: the last chunk, or the header alone for an HTTP/1.0
// body that had no byte.
func (b *streamBody) end() error {
	n := 0
	if b.head != nil {
		b.iov[n], n = b.head, n+1
	}
	if b.chunked {
		b.iov[n], n = lastChunk, n+1
	}
	if n == 0 {
		return nil
	}
	return b.send(n)
}

// send writes the first n of b.iov and forgets them: the stream must not
// keep an event, nor the header once sent.
func (b *streamBody) send(n int) error {
	b.out = b.iov[:n]
	_, err := b.conn.WriteBuffers(&b.out)
	b.iov, b.out = [4][]byte{}, nil
	if err == nil {
		b.head = nil
	}
	return err
}

var (
	crlf      = []byte("\r\n")
	lastChunk = []byte("0\r\n\r\n")
)
