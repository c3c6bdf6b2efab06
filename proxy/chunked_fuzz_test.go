package proxy

import (
	"bufio"
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/valyala/fasthttp"
)

// FuzzChunkedBody: whatever the upstream sends, chunkedBody never panics,
// and a body fasthttp decodes it decodes to the same bytes, whatever the
// sizes of the reads that ask for it, and through its own and burst
// readers (newChunkedBody) whatever the sizes of the connection's reads.
func FuzzChunkedBody(f *testing.F) {
	for _, seed := range []string{
		"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
		"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"f\r\ndata: {\"a\":1}\n\n\r\n0\r\n\r\n",
		"10 \r\n0123456789abcdef\r\n0\r\n\r\n",
		"3\r\nabc\r\n0\r\n\n",
	} {
		f.Add([]byte(seed), uint8(7))
	}
	f.Fuzz(func(t *testing.T, in []byte, readSize uint8) {
		c := &chunkedBody{br: bufio.NewReaderSize(bytes.NewReader(in), 64)}
		var got []byte
		p := make([]byte, int(readSize)+1)
		var err error
		for err == nil {
			var n int
			n, err = c.Read(p)
			got = append(got, p[:n]...)
		}
		var resp fasthttp.Response
		head := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		if resp.ReadLimitBody(bufio.NewReader(io.MultiReader(strings.NewReader(head), bytes.NewReader(in))), 1<<16) != nil {
			return
		}
		if err != io.EOF || !bytes.Equal(got, resp.Body()) {
			t.Errorf("chunkedBody read %q, %v; fasthttp %q", got, err, resp.Body())
		}
		var segs []string
		for b, seg := in, int(readSize)*37+1; len(b) > 0; b = b[min(seg, len(b)):] {
			segs = append(segs, string(b[:min(seg, len(b))]))
		}
		pumpedSegs := slices.Clone(segs) // the reader consumes its segments
		got, err = io.ReadAll(newChunkedBody(bufio.NewReader(strings.NewReader("")), &segmentReader{segs: segs}))
		if err != nil || !bytes.Equal(got, resp.Body()) {
			t.Errorf("chunkedBody through its own readers read %q, %v; fasthttp %q", got, err, resp.Body())
		}
		// Pumped: the connection has nothing before each of its reads; the
		// read that finds nothing is asked again, and goes on from there.
		pumped := newChunkedBody(bufio.NewReader(strings.NewReader("")), &segmentReader{segs: pumpedSegs, pumped: true})
		got, err = got[:0], nil
		for err == nil || err == rawsock.ErrWouldBlock {
			var n int
			n, err = pumped.Read(p)
			if n > 0 && err == rawsock.ErrWouldBlock {
				t.Fatalf("read %d bytes and ErrWouldBlock", n)
			}
			got = append(got, p[:n]...)
		}
		if err != io.EOF || !bytes.Equal(got, resp.Body()) {
			t.Errorf("pumped chunkedBody read %q, %v; fasthttp %q", got, err, resp.Body())
		}
	})
}
