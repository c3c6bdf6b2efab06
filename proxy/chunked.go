package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/loopguard/loopguard/internal/rawsock"
)

// chunkedBody decodes a chunked response body (RFC 9112 section 7.1) from
// the upstream connection's reader. fasthttp's body stream does the same,
// but it returns one chunk a read and keeps its place in the chunk to
// itself; an SSE upstream sends one event a chunk, so an upstream ahead of
// its client was relayed one event a write. chunkedBody knows where it is:
// a read returns every chunk already buffered, and ready tells whether a
// read would wait on the connection. Trailer fields are read and dropped,
// as the proxy forwards none.
//
// Every step reads what it needs before it consumes any of it, so a read
// that returns rawsock.ErrWouldBlock (a pumped connection with nothing more
// yet) leaves the body where it was, and the next Read goes on from there.
type chunkedBody struct {
	br   *bufio.Reader // own, or a burst reader while the upstream is ahead
	own  *bufio.Reader // the body's own small reader; nil: br is used as it is
	src  fillSource    // what own and a burst reader read from
	at   chunkStep
	left int  // bytes of the current chunk still to read, in chunkData
	long bool // in chunkTrailer: inside a line longer than the reader's buffer
	eof  bool
}

// chunkStep is where a chunked body's reading is.
type chunkStep uint8

const (
	chunkSizeLine chunkStep = iota
	chunkData
	chunkCRLF // the CRLF after a chunk's data
	chunkTrailer
)

// chunkedReadBuf is the size of a chunked body's own reader (newChunkedBody):
// room for a size line and for what one read brings of a stream's events
// at a model's pace. The pooled reader that read the response headers
// (4 KiB) is given back.
const chunkedReadBuf = 1 << 10

// chunkedBurstBuf is the size of a burst reader: while an upstream is
// ahead of its client (the last read filled all the room it had), one read
// takes as much of what it sent as nginx's proxy buffer does, and the relay
// writes more of it at once, in fewer reads and writes. A stream holds one
// only while its upstream stays ahead; an open stream waiting for its next
// event holds its own small reader only.
const chunkedBurstBuf = 4 << 10

var burstReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, chunkedBurstBuf) }}

// fillSource is the connection as a chunked body's readers read it, after
// the bytes held past the headers; it notes how much of the room it was
// given the last read filled, which says whether the upstream is ahead.
type fillSource struct {
	held []byte // read first; then the connection, without a wrapper between
	r    io.Reader
	full bool // the last read filled all its room
	half bool // the last read filled at least half its room
}

func (s *fillSource) Read(p []byte) (n int, err error) {
	if len(s.held) > 0 {
		n = copy(p, s.held)
		if s.held = s.held[n:]; len(s.held) == 0 {
			s.held = nil
		}
	} else {
		n, err = s.r.Read(p)
	}
	s.full, s.half = n > 0 && n == len(p), 2*n >= len(p)
	return n, err
}

// newChunkedBody decodes the chunked body that follows the response headers
// pooled read from conn, through a reader of its own; pooled may be
// released once it returns. What pooled holds past the headers is read
// first.
func newChunkedBody(pooled *bufio.Reader, conn io.Reader) *chunkedBody {
	c := &chunkedBody{src: fillSource{r: conn}}
	if n := pooled.Buffered(); n > 0 {
		held, _ := pooled.Peek(n)
		c.src.held = append([]byte(nil), held...)
	}
	c.own = bufio.NewReaderSize(&c.src, chunkedReadBuf)
	c.br = c.own
	return c
}

// pickReader reads on through a burst reader once a read filled the
// body's own reader (the upstream is ahead of the relay), and back through
// its own once a read filled less than half a burst reader (it is not, or
// no longer far). Only an empty reader is swapped, so no byte is lost or
// reordered.
func (c *chunkedBody) pickReader() {
	if c.own == nil || c.br.Buffered() > 0 {
		return
	}
	switch {
	case c.br == c.own && c.src.full:
		c.br = burstReaders.Get().(*bufio.Reader)
		c.br.Reset(&c.src)
	case c.br != c.own && !c.src.half:
		c.releaseBurst()
	}
}

// releaseBurst gives a burst reader back; its buffer must hold nothing
// still to read.
func (c *chunkedBody) releaseBurst() {
	if c.own == nil || c.br == c.own {
		return
	}
	c.br.Reset(nil)
	burstReaders.Put(c.br)
	c.br = c.own
}

// errChunk is a chunked body whose framing is broken; the message never
// carries the upstream's bytes.
var errChunk = errors.New("the upstream sent a malformed chunked body")

// maxChunkSizeDigits bounds a chunk's size line as fasthttp does on 64-bit
// platforms (leading zeros count); maxChunkSize bounds the size, which only
// counts bytes still to come and is never allocated.
const (
	maxChunkSizeDigits = 15
	maxChunkSize       = 1<<31 - 1
)

// Read waits on the connection only while it has nothing to return: once
// it has bytes, it goes on only as far as the buffered bytes take it.
func (c *chunkedBody) Read(p []byte) (int, error) {
	if c.eof {
		return 0, io.EOF
	}
	c.pickReader()
	n := 0
	for n < len(p) && (n == 0 || c.ready()) {
		var err error
		switch c.at {
		case chunkSizeLine:
			var size int
			if size, err = c.sizeLine(); err == nil {
				c.at, c.left = chunkData, size
				if size == 0 {
					c.at = chunkTrailer
				}
			}
		case chunkData:
			var m int
			m, err = c.br.Read(p[n : n+min(len(p)-n, c.left)])
			n += m
			c.left -= m
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if c.left > 0 || err != nil {
				break
			}
			c.at = chunkCRLF
			fallthrough // the CRLF now: it is most often in the same read
		case chunkCRLF:
			if err = c.crlf(); err == nil {
				c.at = chunkSizeLine
			}
		case chunkTrailer:
			if err = c.trailer(); err == nil {
				c.eof = true
				c.releaseBurst() // what follows the body is not read
				return n, io.EOF
			}
		}
		if err != nil {
			if n > 0 && err == rawsock.ErrWouldBlock {
				err = nil // the bytes now; the rest once it comes
			}
			return n, err
		}
	}
	return n, nil
}

// ready reports whether the next step of Read goes without waiting on the
// connection: the rest of the current chunk is buffered with the CRLF that
// ends it, or only part of it is (a read returns that part), or the next
// chunk's size line and at least its first byte are, on the same terms.
// The last chunk is left to a read of its own.
func (c *chunkedBody) ready() bool {
	buffered := c.br.Buffered()
	b, _ := c.br.Peek(buffered)
	switch c.at {
	case chunkData:
		return buffered > 0 && (buffered < c.left || buffered >= c.left+2)
	case chunkCRLF:
		if buffered < 2 {
			return false
		}
		b = b[2:]
	case chunkTrailer:
		return false
	}
	line := bytes.IndexByte(b, '\n')
	if line < 0 {
		return false
	}
	size, ok := chunkSize(b[:line+1])
	data := len(b) - line - 1
	return ok && size > 0 && data > 0 && (data < size || data >= size+2)
}

// sizeLine reads a chunk's size line. A line longer than the reader's
// buffer is broken framing.
func (c *chunkedBody) sizeLine() (int, error) {
	line, err := c.line()
	if err != nil {
		return 0, chunkReadError(err)
	}
	size, ok := chunkSize(line)
	if !ok {
		return 0, errChunk
	}
	c.br.Discard(len(line))
	return size, nil
}

// line returns the next line, LF included, without consuming it; it reads
// until the line is whole, and returns bufio.ErrBufferFull with the
// buffer's bytes when it does not fit.
func (c *chunkedBody) line() ([]byte, error) {
	for {
		b, _ := c.br.Peek(c.br.Buffered())
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			return b[:i+1], nil
		}
		if len(b) == c.br.Size() {
			return b, bufio.ErrBufferFull
		}
		// Peek reads (one read, bytes or an error) when it lacks a byte.
		if _, err := c.br.Peek(len(b) + 1); err != nil {
			return nil, err
		}
	}
}

// chunkSize parses a size line, CRLF included: hex digits, then either
// nothing, blanks, or a chunk extension (ignored), as fasthttp accepts.
func chunkSize(line []byte) (int, bool) {
	rest, ok := bytes.CutSuffix(line, []byte("\r\n"))
	if !ok {
		return 0, false
	}
	size, i := int64(0), 0
	for ; i < len(rest); i++ {
		d := unhex(rest[i])
		if d < 0 {
			break
		}
		if i == maxChunkSizeDigits {
			return 0, false
		}
		size = size<<4 | int64(d)
	}
	if i == 0 || size > maxChunkSize {
		return 0, false
	}
	ext := rest[i:]
	if len(ext) > 0 && ext[0] != ';' && len(bytes.Trim(ext, " \t")) > 0 {
		return 0, false
	}
	return int(size), true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// crlf reads the CRLF that ends a chunk's data.
func (c *chunkedBody) crlf() error {
	b, err := c.br.Peek(2)
	if len(b) > 0 && b[0] != '\r' || len(b) > 1 && b[1] != '\n' {
		return errChunk
	}
	if err != nil {
		return chunkReadError(err)
	}
	c.br.Discard(2)
	return nil
}

// trailer reads the trailer section after the last chunk, up to the blank
// line that ends the body; a bare LF ends a line, as fasthttp takes it. A
// line longer than the reader's buffer is read on to its end.
func (c *chunkedBody) trailer() error {
	for {
		line, err := c.line()
		if err == bufio.ErrBufferFull {
			c.br.Discard(len(line))
			c.long = true
			continue
		}
		if err != nil {
			return chunkReadError(err)
		}
		c.br.Discard(len(line))
		end := !c.long && (len(line) == 1 || len(line) == 2 && line[0] == '\r')
		c.long = false
		if end {
			return nil
		}
	}
}

// chunkReadError is what reading the framing failed with: a line longer
// than the reader's buffer (line's bufio.ErrBufferFull) is broken framing,
// an end is unexpected. The errors come bare from bufio and line, and a
// pumped read that would block passes here every event: plain comparisons,
// not errors.Is, whose type assertions fill a runtime cache (an
// allocation) the first time each error type passes.
func chunkReadError(err error) error {
	switch err {
	case bufio.ErrBufferFull:
		return errChunk
	case io.EOF:
		return io.ErrUnexpectedEOF
	}
	return err
}
