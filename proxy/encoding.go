package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/klauspost/compress/zstd"
	brotli "github.com/molecule-man/go-brrr"
	"github.com/tidwall/gjson"
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
	return c.decodeHeld(dst, src, limit, nil)
}

// decodeHeld is decode with every buffer it grows taken from hold first:
// past what hold may take, decoding stops with errBodyMemory, so that
// bodies that inflate together stay within the body budget.
func (c *codings) decodeHeld(dst, src []byte, limit int, hold *budgetShare) ([]byte, error) {
	cur := src
	for i := c.n - 1; i >= 0; i-- {
		var out []byte
		if i == 0 {
			out = dst
		}
		w := limitWriter{b: out, limit: limit, hold: hold}
		if n := cap(out); n > 0 {
			// A pooled buffer holds memory too, once it holds a body.
			if !hold.take(int64(n)) {
				return dst, errBodyMemory
			}
			w.held = n
		}
		err := decodeInto(&w, cur, c.list[i])
		if err != nil {
			if i == 0 {
				return w.b, err
			}
			return dst, err
		}
		cur = w.b
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

// decodeInto writes src with coding k undone to w.
func decodeInto(w *limitWriter, src []byte, k coding) error {
	if k == codingZstd {
		return decodeZstd(w, src)
	}
	var err error
	switch k {
	case codingGzip:
		_, err = fasthttp.WriteGunzip(w, src)
	case codingDeflate:
		_, err = fasthttp.WriteInflate(w, src)
	case codingBrotli:
		err = decodeBrotli(w, src)
	}
	switch {
	case w.over:
		return errDecodedTooLarge
	case w.short:
		return errBodyMemory
	case err != nil:
		return fmt.Errorf("decode %s: %w", k, err)
	}
	return nil
}

// decodeBrotli writes src, brotli-coded, to w. Its decoder holds a ring
// buffer as large as the stream's window (up to 16 MiB) and up to as much
// output not yet written, taken from w's hold while it decodes; a decoder
// of its own, closed after, so that no pool keeps its output buffer
// (fasthttp's readers keep theirs).
func decodeBrotli(w *limitWriter, src []byte) error {
	held := 2 * int64(brotliWindow(src))
	if !w.hold.take(held) {
		w.short = true
		return errBodyMemory
	}
	defer w.hold.drop(held)
	r := brotli.NewReader(bytes.NewReader(src))
	defer r.Close()
	_, err := io.Copy(w, r)
	return err
}

// brotliWindow is the window size a brotli stream's header declares (RFC
// 7932 section 9.1): the most its decoder holds besides its output. A
// header that asks for a large window (a non-standard extension) counts
// as 1 GiB, its largest.
func brotliWindow(src []byte) int {
	if len(src) == 0 {
		return 0
	}
	b := src[0]
	wbits := 16
	switch n, m := (b>>1)&7, (b>>4)&7; {
	case b&1 == 0:
	case n != 0:
		wbits = 17 + int(n)
	case m == 1:
		wbits = 30
	case m == 0:
		wbits = 17
	default:
		wbits = 8 + int(m)
	}
	return 1<<wbits - 16
}

// limitWriter appends what is written to b, and fails once b would pass
// limit, or would grow past what hold may take, which stops the decoder
// that writes to it.
type limitWriter struct {
	b     []byte
	limit int
	// hold is taken the capacity b grows to before it grows (nil: no
	// bound); held is what it holds for b.
	hold *budgetShare
	held int
	over bool // past limit
	// short: past what hold may take.
	short bool
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if err := w.room(len(p)); err != nil {
		return 0, err
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// ReadFrom appends the rest of r to b, growing b as Write does.
func (w *limitWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		if len(w.b) == cap(w.b) {
			if err := w.room(1); err != nil {
				return n, err
			}
		}
		m, err := r.Read(w.b[len(w.b):cap(w.b)])
		w.b = w.b[:len(w.b)+m]
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// room makes b able to take n more bytes without growing. A larger b is
// taken from hold before it is made, and the old one given back once it
// is copied: what hold holds is what the decoding holds.
func (w *limitWriter) room(n int) error {
	need := len(w.b) + n
	if w.limit > 0 && need > w.limit {
		w.over = true
		return errDecodedTooLarge
	}
	if need <= cap(w.b) {
		return nil
	}
	c := max(need, 2*cap(w.b), minDecodeBuf)
	if w.limit > 0 {
		c = min(c, w.limit)
	}
	if !w.hold.take(int64(c)) {
		w.short = true
		return errBodyMemory
	}
	b := make([]byte, len(w.b), c)
	copy(b, w.b)
	w.hold.drop(int64(w.held))
	w.b, w.held = b, c
	return nil
}

// minDecodeBuf is the smallest buffer a decoding grows.
const minDecodeBuf = 16 << 10

// zstd decoders are kept per output bound and mode (a server has one
// body limit and a few bounds under it; tests a few more): DecodeAll is
// safe for concurrent use and its memory bound is an option of the
// decoder.
var zstdDecoders sync.Map // zstdKey -> *zstd.Decoder

type zstdKey struct {
	limit int  // WithDecoderMaxMemory; 0: none
	inCap bool // WithDecodeAllCapLimit
}

func zstdDecoder(k zstdKey) (*zstd.Decoder, error) {
	if d, ok := zstdDecoders.Load(k); ok {
		return d.(*zstd.Decoder), nil
	}
	opts := []zstd.DOption{zstd.WithDecoderConcurrency(0), zstd.WithDecodeAllCapLimit(k.inCap)}
	if k.limit > 0 {
		// The decoder refuses a frame that says it is larger, and stops
		// one that turns out to be, near the limit.
		opts = append(opts, zstd.WithDecoderMaxMemory(uint64(k.limit)))
	}
	nd, err := zstd.NewReader(nil, opts...)
	if err != nil {
		return nil, err
	}
	d, _ := zstdDecoders.LoadOrStore(k, nd)
	return d.(*zstd.Decoder), nil
}

// decodeZstd writes src, zstd-coded, to w. A frame that says its size is
// decoded into that much room, taken first; one that does not (a
// streaming encoder's) is decoded under a bound taken first, twice over
// for the decoder's growing of its output, and again under twice that
// bound while it does not fit: the work is at most twice a single pass,
// and a bomb stops where the budget does.
func decodeZstd(w *limitWriter, src []byte) error {
	var h zstd.Header
	sized := h.Decode(src) == nil && h.HasFCS
	if !sized {
		return decodeZstdUnsized(w, src, h.WindowSize)
	}
	d, err := zstdDecoder(zstdKey{limit: w.limit, inCap: true})
	if err != nil {
		return err
	}
	room := int(min(h.FrameContentSize, uint64(math.MaxInt32)))
	for {
		if w.limit > 0 {
			room = min(room, w.limit-len(w.b)+1)
		}
		if err := w.room(room); err != nil {
			return err
		}
		out, err := d.DecodeAll(src, w.b)
		switch {
		case err == nil:
			w.b = out
			return nil
		case errors.Is(err, zstd.ErrDecoderSizeExceeded) && (w.limit <= 0 || cap(w.b) < w.limit):
			// Several frames, the first of which said its size.
			room = 2 * (cap(w.b) - len(w.b))
		default:
			return zstdError(err)
		}
	}
}

// decodeZstdUnsized is decodeZstd for frames that do not say their size
// (a streaming encoder's): a stream decoder writes them to w, which takes
// its output from the budget as it grows. The decoder holds the frame's
// window of history and a block or two, taken from w's hold while it
// decodes; it decodes as it is read, with no goroutines of its own, and
// is kept for the next body.
func decodeZstdUnsized(w *limitWriter, src []byte, window uint64) error {
	if w.limit > 0 && window > uint64(w.limit) {
		return errDecodedTooLarge // more history than a body may hold
	}
	held := 2*int64(window) + 2*zstdBlock
	if !w.hold.take(held) {
		w.short = true
		return errBodyMemory
	}
	defer w.hold.drop(held)
	d, _ := zstdStreams.Get().(*zstd.Decoder)
	if d == nil {
		var err error
		if d, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true)); err != nil {
			return err
		}
	}
	defer func() {
		_ = d.Reset(nil)
		zstdStreams.Put(d)
	}()
	err := d.Reset(bytes.NewReader(src))
	if err == nil {
		_, err = d.WriteTo(w)
	}
	switch {
	case w.over:
		return errDecodedTooLarge
	case w.short:
		return errBodyMemory
	case err != nil:
		return zstdError(err)
	}
	return nil
}

// zstdStreams are decoders of frames that do not say their size.
var zstdStreams sync.Pool

// zstdBlock is the largest block of a zstd frame (RFC 8878 section
// 3.1.1.2.4).
const zstdBlock = 128 << 10

// zstdError is what a failed zstd decoding says: a frame larger than the
// limit, or whose window is (it asks for more memory than a body may
// take, and the decoder refuses it before allocating), is too large.
func zstdError(err error) error {
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return errDecodedTooLarge
	}
	return fmt.Errorf("decode zstd: %w", err)
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

// looksJSONObject reports a body that is a JSON object as it is: no
// coding's output begins with '{' and parses whole.
func looksJSONObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{' && gjson.ValidBytes(b)
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

// decodeBody decodes raw, coded with cs, within limit bytes and what hold
// may take (nil: no bound).
func decodeBody(cs codings, raw []byte, limit int, hold *budgetShare) (*codedBody, error) {
	c := codedBodies.Get().(*codedBody)
	var err error
	c.decoded, err = cs.decodeHeld(c.decoded[:0], raw, limit, hold)
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

// maxPooledBody: larger buffers are left to the collector, so that large
// bodies do not stay held by the pool, outside the body budget, after
// their requests.
const maxPooledBody = 1 << 20
