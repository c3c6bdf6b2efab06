package proxy

import (
	"errors"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	brotli "github.com/molecule-man/go-brrr"
)

// A guarded stream the upstream compressed although loopguard asked for
// identity (gateways that compress whatever Accept-Encoding says) is
// decoded as it arrives and relayed to the client decoded, without a
// Content-Encoding: identity is acceptable to every HTTP client, and the
// decoded events then take the same relay loop as a plain stream, so
// holding tool calls, trimming the tail, a cut and the in-band error event
// work alike (docs/streams.md: compression).

// errDecoderPanic: a decoder panicked on the upstream's bytes.
var errDecoderPanic = errors.New("proxy: the decoder panicked")

// decodedStream reads a coded stream from src decoded, codings applied in
// the order cs lists them undone in reverse. The decoders are made on the
// first Read, in the relay: gzip and zlib read their header as they are
// made, and the handler must not wait for the upstream's first bytes. A
// decoder's error or panic ends the stream as an upstream failure would:
// the client, which can no longer read the coded bytes, gets the in-band
// error event instead.
type decodedStream struct {
	src  io.Reader
	cs   codings
	r    io.Reader // the outermost decoder; nil before the first Read
	zstd []*zstd.Decoder
	err  error // the decoder's first error, returned from then on
}

func newDecodedStream(src io.Reader, cs codings) *decodedStream {
	return &decodedStream{src: src, cs: cs}
}

func (d *decodedStream) Read(p []byte) (n int, err error) {
	if d.err != nil {
		return 0, d.err
	}
	defer func() {
		if p := recover(); p != nil {
			n, err = 0, errDecoderPanic
		}
		if err != nil {
			d.err = err
		}
	}()
	if d.r == nil {
		if err := d.open(); err != nil {
			return 0, err
		}
	}
	return d.r.Read(p)
}

// open stacks a decoder for each coding on src, the last applied first.
func (d *decodedStream) open() error {
	r := d.src
	for i := d.cs.n - 1; i >= 0; i-- {
		var err error
		switch d.cs.list[i] {
		case codingGzip:
			r, err = gzip.NewReader(r)
		case codingDeflate:
			r, err = zlib.NewReader(r)
		case codingBrotli:
			r = brotli.NewReader(r)
		default:
			var zr *zstd.Decoder
			zr, err = zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(inspectLimit))
			if err == nil {
				d.zstd = append(d.zstd, zr)
				r = zr
			}
		}
		if err != nil {
			return err
		}
	}
	d.r = r
	return nil
}

// close frees the decoders' state; the stream's source is its owner's to
// close.
func (d *decodedStream) close() {
	for _, zr := range d.zstd {
		zr.Close()
	}
	d.zstd = nil
}
