package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/valyala/fasthttp"
)

// Content codings (RFC 9110 section 8.4). Clients compress request bodies
// (Codex signed in with ChatGPT sends every Responses turn as zstd; SDKs
// and gateways gzip), and some gateways compress answers whatever
// Accept-Encoding asked for. loopguard decodes a copy to inspect and keeps
// the bytes on the wire as they were sent, so a coding it cannot read costs
// the inspection of that body, never the exchange.

// coding is one content coding loopguard can decode and encode.
type coding uint8

const (
	codingGzip coding = iota + 1
	codingDeflate
	codingBrotli
	codingZstd
)

// maxCodings bounds a Content-Encoding list: real senders apply one coding,
// and each layer costs a full pass over the body.
const maxCodings = 4

// codings is a Content-Encoding list in the order the codings were applied;
// the zero value is no coding (identity).
type codings struct {
	list [maxCodings]coding
	n    int
}

var (
	// errUnknownCoding: a coding loopguard cannot decode; the body passes
	// through as sent.
	errUnknownCoding = errors.New("proxy: unknown content coding")
	// errDecodedTooLarge: the decoded body exceeds the body limit.
	errDecodedTooLarge = errors.New("proxy: decoded body exceeds the body limit")
)

// parseCodings reads a Content-Encoding header value: a comma-separated
// list, case-insensitive, identity entries ignored.
func parseCodings(v []byte) (codings, error) {
	var c codings
	for len(v) > 0 {
		var tok []byte
		tok, v, _ = bytes.Cut(v, []byte{','})
		tok = bytes.TrimSpace(tok)
		var k coding
		switch {
		case len(tok) == 0 || asciiEqualFold(tok, "identity"):
			continue
		case asciiEqualFold(tok, "gzip") || asciiEqualFold(tok, "x-gzip"):
			k = codingGzip
		case asciiEqualFold(tok, "deflate"):
			k = codingDeflate
		case asciiEqualFold(tok, "br"):
			k = codingBrotli
		case asciiEqualFold(tok, "zstd"):
			k = codingZstd
		default:
			return codings{}, errUnknownCoding
		}
		if c.n == maxCodings {
			return codings{}, errUnknownCoding
		}
		c.list[c.n] = k
		c.n++
	}
	return c, nil
}

// empty reports no coding: the body is as it reads.
func (c *codings) empty() bool { return c.n == 0 }

// decode appends to dst src with every coding undone, last applied first.
// The decoded size of every layer is bounded by limit (0: no bound); past
// it decoding stops with errDecodedTooLarge, so a small body that inflates
// to gigabytes costs no more than limit bytes.
func (c *codings) decode(dst, src []byte, limit int) ([]byte, error) {
	if c.n == 1 {
		return decodeOne(dst, src, c.list[0], limit)
	}
	cur := src
	for i := c.n - 1; i >= 0; i-- {
		var out []byte
		if i == 0 {
			out = dst
		}
		next, err := decodeOne(out, cur, c.list[i], limit)
		if err != nil {
			return dst, err
		}
		cur = next
	}
	return cur, nil
}

// encode appends to dst src with every coding applied in order.
func (c *codings) encode(dst, src []byte) []byte {
	cur := src
	for i := 0; i < c.n; i++ {
		var out []byte
		if i == c.n-1 {
			out = dst
		}
		cur = encodeOne(out, cur, c.list[i])
	}
	if c.n == 0 {
		return append(dst, src...)
	}
	return cur
}

func encodeOne(dst, src []byte, k coding) []byte {
	switch k {
	case codingGzip:
		return fasthttp.AppendGzipBytes(dst, src)
	case codingDeflate:
		// HTTP's deflate is the zlib format (RFC 9110 section 8.4.1.2),
		// which fasthttp's deflate writes.
		return fasthttp.AppendDeflateBytes(dst, src)
	case codingBrotli:
		return fasthttp.AppendBrotliBytes(dst, src)
	default:
		return zstdEncoder().EncodeAll(src, dst)
	}
}

func decodeOne(dst, src []byte, k coding, limit int) ([]byte, error) {
	if k == codingZstd {
		return decodeZstd(dst, src, limit)
	}
	w := limitWriter{b: dst, limit: limit}
	var err error
	switch k {
	case codingGzip:
		_, err = fasthttp.WriteGunzip(&w, src)
	case codingDeflate:
		_, err = fasthttp.WriteInflate(&w, src)
	case codingBrotli:
		_, err = fasthttp.WriteUnbrotli(&w, src)
	}
	if w.over {
		return w.b, errDecodedTooLarge
	}
	if err != nil {
		return w.b, fmt.Errorf("decode %s: %w", k, err)
	}
	return w.b, nil
}

// limitWriter appends what is written to b, and fails once b would pass
// limit, which stops the decoder that writes to it.
type limitWriter struct {
	b     []byte
	limit int
	over  bool
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.limit > 0 && len(w.b)+len(p) > w.limit {
		w.over = true
		return 0, errDecodedTooLarge
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// zstd decoders are kept per limit (a server has one body limit; tests a
// few): DecodeAll is safe for concurrent use and its memory bound is an
// option of the decoder.
var zstdDecoders sync.Map // int -> *zstd.Decoder

func decodeZstd(dst, src []byte, limit int) ([]byte, error) {
	d, ok := zstdDecoders.Load(limit)
	if !ok {
		opts := []zstd.DOption{zstd.WithDecoderConcurrency(0)}
		if limit > 0 {
			// The decoder refuses a frame that says it is larger, and stops
			// one that turns out to be, near the limit.
			opts = append(opts, zstd.WithDecoderMaxMemory(uint64(limit)))
		}
		nd, err := zstd.NewReader(nil, opts...)
		if err != nil {
			return dst, err
		}
		d, _ = zstdDecoders.LoadOrStore(limit, nd)
	}
	n := len(dst)
	out, err := d.(*zstd.Decoder).DecodeAll(src, dst)
	// A frame whose window is larger than the limit asks for more memory
	// than a body may take; the decoder refuses it before allocating.
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) ||
		err == nil && limit > 0 && len(out)-n > limit {
		return dst, errDecodedTooLarge
	}
	if err != nil {
		return dst, fmt.Errorf("decode zstd: %w", err)
	}
	return out, nil
}

var zstdEnc struct {
	once sync.Once
	e    *zstd.Encoder
}

// zstdEncoder encodes rewritten bodies; EncodeAll is safe for concurrent
// use.
func zstdEncoder() *zstd.Encoder {
	zstdEnc.once.Do(func() {
		zstdEnc.e, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	})
	return zstdEnc.e
}

func (k coding) String() string {
	switch k {
	case codingGzip:
		return "gzip"
	case codingDeflate:
		return "deflate"
	case codingBrotli:
		return "br"
	case codingZstd:
		return "zstd"
	}
	return "identity"
}

// codedBody is a request body sent with a content coding, decoded for
// inspection. Its buffers are pooled: release it once the upstream call
// has sent the request.
type codedBody struct {
	codings codings
	raw     []byte // the client's bytes; aliases the request
	decoded []byte
	encoded []byte // a rewrite, coded as raw was
}

var codedBodies = sync.Pool{New: func() any { return new(codedBody) }}

// decodeBody decodes raw, coded with cs, within limit bytes.
func decodeBody(cs codings, raw []byte, limit int) (*codedBody, error) {
	c := codedBodies.Get().(*codedBody)
	var err error
	c.decoded, err = cs.decode(c.decoded[:0], raw, limit)
	if err != nil {
		c.release()
		return nil, err
	}
	c.codings, c.raw = cs, raw
	return c, nil
}

// wire is the body to send upstream for body, what inspection left of the
// decoded body: the client's own bytes when it is the decoded body
// unchanged, else body coded the way the client coded it.
func (c *codedBody) wire(body []byte) []byte {
	if len(body) == len(c.decoded) && (len(body) == 0 || &body[0] == &c.decoded[0]) {
		return c.raw
	}
	c.encoded = c.codings.encode(c.encoded[:0], body)
	return c.encoded
}

// release returns c to the pool; its bodies must not be used afterwards.
func (c *codedBody) release() {
	c.raw = nil
	c.codings = codings{}
	if cap(c.decoded) > maxPooledBody {
		c.decoded = nil
	}
	if cap(c.encoded) > maxPooledBody {
		c.encoded = nil
	}
	codedBodies.Put(c)
}

// maxPooledBody: larger buffers are left to the collector, so that one
// huge body does not stay held by the pool.
const maxPooledBody = 8 << 20
