package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	brotli "github.com/molecule-man/go-brrr"

	"github.com/loopguard/loopguard/sse"
)

// A stream the upstream compressed although loopguard asked for identity
// (gateways that compress whatever Accept-Encoding says) reaches the client
// byte for byte as the upstream coded it, and a decoded copy is inspected
// as it comes: each read of the upstream goes to the client first, then
// through a decoder, and the events it completes go to the observer. The
// client has every event before loopguard reads it, so a cut cannot hold
// one back: it ends the stream after the events the client has, with the
// end coded as a continuation of the upstream's coded stream, which the
// client's decoder reads on from where it is. Only the upstream's bytes
// tell where that decoder is, so each candidate continuation is tried on a
// fresh decoder over every byte relayed before it is sent (endingFor); a
// point where none decodes (the upstream's encoder had not flushed) waits
// for the next read.

// codedObserver is a responseObserver that can watch a coded stream.
type codedObserver interface {
	responseObserver
	// cuts reports whether the answer may be cut at all.
	cuts() bool
	// codedEvent reads one decoded event the client already got; ready:
	// the answer is cut and its end may follow now.
	codedEvent(ev *sse.Event) (ready bool)
	// codedEnd appends the decoded end of a cut stream.
	codedEnd(out []byte) []byte
}

// maxCodedHistory bounds the coded bytes a stream keeps to try endings on:
// past it, a cut closes the client's connection instead of ending the
// stream well-formed.
const maxCodedHistory = 4 << 20

// maxEndTries bounds the reads a cut waits for a point where the coded
// stream can be ended; past it the client's connection is closed.
const maxEndTries = 8

// codedStream is the inspection of one coded stream.
type codedStream struct {
	k   coding
	obs codedObserver
	dec *streamDecoder // nil once inspection stopped
	src decodedSource
	rd  *sse.Reader
	// history is every coded byte relayed, while the answer may be cut and
	// within maxCodedHistory; over: it grew past that.
	history []byte
	over    bool
	decoded int64 // bytes decoded so far
	// The running checksum of what was decoded, as the coding's trailer
	// carries it.
	crc   uint32
	adler uint32
	xxh   *xxhash.Digest
	ready bool // the answer is cut and its end may follow
	tries int  // endings tried and failed since ready
	// held is what was read and not relayed yet (hold); heldOut the part
	// of it that goes now, walked the part zw has seen.
	held            []byte
	heldOut, walked int
	zw              zstdWalker
}

func newCodedStream(k coding, obs codedObserver, maxEvent int) *codedStream {
	c := &codedStream{k: k, obs: obs, dec: newStreamDecoder(k, inspectLimit), adler: 1}
	c.rd = sse.NewReader(&c.src, maxEvent)
	if k == codingZstd {
		c.xxh = xxhash.New()
	}
	return c
}

// decodedSource hands the decoded bytes of the last read to the SSE reader.
type decodedSource struct{ b []byte }

func (s *decodedSource) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, sse.ErrWouldBlock
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// relayCoded relays the coded stream ub sends, inspecting c's decoded copy:
// nil when the upstream ended it (st.stats.readErr says how), errClientGone
// when a write failed, errCut after a cut. obs panicking is s's to count.
func (st *openStream) relayCoded(w *bufio.Writer, c *codedStream) error {
	defer c.close()
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	for {
		n, err := st.ub.Read(*buf)
		data := c.hold((*buf)[:n], err != nil)
		if len(data) > 0 {
			m, _ := w.Write(data)
			st.stats.written += int64(m)
			if w.Flush() != nil {
				return errClientGone
			}
			if st.stats.ttfb == 0 {
				st.stats.ttfb = time.Since(st.start)
			}
			cut := c.read(st.s, data, &st.stats)
			c.release(len(data))
			if cut {
				if end := c.ending(st.s); end != nil {
					m, _ := w.Write(end)
					st.stats.written += int64(m)
					if w.Flush() != nil {
						return errClientGone
					}
					return errCut
				}
				if c.tries > maxEndTries || c.over {
					// No well-formed end can follow what the client has:
					// the connection closes without the last chunk, as when
					// an upstream fails mid-stream.
					_ = st.conn.Close()
					return errCut
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				st.stats.readErr = err
			}
			return nil
		}
	}
}

// syncFlush ends the empty stored block of a deflate sync flush (RFC 1951
// section 3.2.4: LEN 0, NLEN 0xffff), which leaves the stream at a byte
// boundary between blocks.
var syncFlush = []byte{0, 0, 0xff, 0xff}

// maxHeld bounds the coded bytes hold keeps back: an upstream whose encoder
// never flushes gets its bytes relayed as they come all the same.
const maxHeld = 16 << 10

// hold returns what of raw, just read, goes to the client now. While the
// answer may be cut, a coded stream is relayed up to the last point where
// the upstream's encoder left its output whole (a deflate sync flush, a
// zstd block's end) and the bytes after it, the start of a unit that ends
// in a later read, wait for the rest: a cut can then end the stream right
// after what the client has. A unit is flushed whole by an encoder that
// flushes each event, so the client waits for no event. Brotli's units end
// at bit offsets no cheap scan finds: its bytes go as they come. last: the
// stream is over, and everything goes.
func (c *codedStream) hold(raw []byte, last bool) []byte {
	if c.dec == nil || c.over || !c.obs.cuts() || c.k == codingBrotli || c.zw.bad {
		if len(c.held) == 0 {
			return raw
		}
		c.held = append(c.held, raw...)
		c.heldOut = len(c.held)
		return c.held
	}
	c.held = append(c.held, raw...)
	switch c.k {
	case codingGzip, codingDeflate:
		if i := bytes.LastIndex(c.held, syncFlush); i >= 0 {
			c.heldOut = i + len(syncFlush)
		}
	case codingZstd:
		if b := c.zw.walk(c.held[c.walked:]); b >= 0 {
			c.heldOut = c.walked + b
		}
		c.walked = len(c.held)
	}
	if last || len(c.held) > maxHeld {
		c.heldOut = len(c.held)
	}
	return c.held[:c.heldOut]
}

// release drops the n bytes of what hold returned, once relayed.
func (c *codedStream) release(n int) {
	if len(c.held) == 0 {
		return
	}
	c.held = c.held[:copy(c.held, c.held[n:])]
	c.walked = max(0, c.walked-n)
	c.heldOut = 0
}

// read inspects raw, the coded bytes just relayed, and reports whether the
// stream should end now: the answer is cut and the client has whole events.
func (c *codedStream) read(s *Server, raw []byte, stats *relayStats) bool {
	if c.dec == nil {
		return false
	}
	if !c.over && c.obs.cuts() {
		if len(c.history)+len(raw) > maxCodedHistory {
			c.history, c.over = nil, true
		} else {
			c.history = append(c.history, raw...)
		}
	}
	out, err := c.dec.feed(raw)
	c.sum(out)
	c.src.b = out
	for {
		ev, rerr := c.rd.Next()
		if rerr == sse.ErrWouldBlock {
			break
		}
		if rerr != nil {
			// An event past stream.max_event_bytes: the rest goes
			// uninspected, as in a plain stream.
			c.stop()
			return false
		}
		if len(ev.Raw) == 0 {
			continue
		}
		stats.events++
		ready, ok := s.observeCodedEvent(c.obs, &ev)
		if !ok {
			c.stop()
			return false
		}
		c.ready = c.ready || ready
	}
	if err != nil && err != io.EOF {
		s.log.Warn().Str("content_encoding", c.k.String()).AnErr("error", err).
			Msg("streamed answer cannot be decoded for inspection; the rest passes through uninspected")
		c.stop()
		return false
	}
	if !c.ready || len(c.rd.Buffered()) > 0 {
		return false
	}
	return true
}

// sum adds decoded bytes to the running checksum of the coding's trailer.
func (c *codedStream) sum(b []byte) {
	c.decoded += int64(len(b))
	switch c.k {
	case codingGzip:
		c.crc = crc32.Update(c.crc, crc32.IEEETable, b)
	case codingDeflate:
		c.adler = adler32Update(c.adler, b)
	case codingZstd:
		_, _ = c.xxh.Write(b)
	}
}

// ending returns the coded end of the cut stream, nil when none decodes
// after what the client has yet (tries counts them).
func (c *codedStream) ending(s *Server) []byte {
	if c.over {
		return nil
	}
	end, ok := s.observeCodedEnd(c.obs)
	if !ok {
		c.over = true // nothing to end it with
		return nil
	}
	for _, cand := range c.candidates(end) {
		if c.decodes(cand, end) {
			return cand
		}
	}
	c.tries++
	return nil
}

// candidates are the coded continuations that may end the stream with
// end, each valid where the upstream's encoder left its output at a
// boundary: deflate (gzip, zlib) after a sync flush, a brotli meta-block
// boundary after a flush, a zstd block boundary; and a new gzip member or
// zstd frame after the upstream's ended (decoders read them in sequence).
func (c *codedStream) candidates(end []byte) [][]byte {
	switch c.k {
	case codingGzip:
		b := appendStoredBlocks(nil, end)
		b = binary.LittleEndian.AppendUint32(b, crc32.Update(c.crc, crc32.IEEETable, end))
		b = binary.LittleEndian.AppendUint32(b, uint32(c.decoded+int64(len(end))))
		return [][]byte{b, appendGzipMember(end)}
	case codingDeflate:
		b := appendStoredBlocks(nil, end)
		return [][]byte{binary.BigEndian.AppendUint32(b, adler32Update(c.adler, end))}
	case codingBrotli:
		return [][]byte{append(appendBrotliUncompressed(nil, end), brotliLastEmpty)}
	default:
		b := appendZstdRawBlocks(nil, end)
		if zstdChecksummed(c.history) {
			x := *c.xxh
			_, _ = x.Write(end)
			b = binary.LittleEndian.AppendUint32(b, uint32(x.Sum64()))
		}
		return [][]byte{b, zstdEncoder().EncodeAll(end, nil)}
	}
}

// decodes reports whether the history followed by cand decodes, with a
// fresh decoder that checks the coding's trailer, to what was decoded so
// far followed by end, and nothing after it.
func (c *codedStream) decodes(cand, end []byte) bool {
	trial := make([]byte, 0, len(c.history)+len(cand))
	trial = append(append(trial, c.history...), cand...)
	// The history decodes to what the stream decoder decoded, within its
	// bound; the candidate adds end.
	got, err := decodeOne(nil, trial, c.k, 0)
	return err == nil && int64(len(got)) == c.decoded+int64(len(end)) && bytes.HasSuffix(got, end)
}

// stop ends the inspection; the rest of the stream passes through.
func (c *codedStream) stop() {
	if c.dec != nil {
		c.dec.close()
		c.dec = nil
	}
	c.history, c.ready = nil, false
}

func (c *codedStream) close() { c.stop() }

// appendStoredBlocks appends b as deflate stored blocks (RFC 1951 section
// 3.2.4), the last one final, from a byte boundary.
func appendStoredBlocks(dst, b []byte) []byte {
	for {
		n := min(len(b), 0xffff)
		final := byte(0)
		if n == len(b) {
			final = 1
		}
		dst = append(dst, final)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(n))
		dst = binary.LittleEndian.AppendUint16(dst, ^uint16(n))
		dst = append(dst, b[:n]...)
		b = b[n:]
		if final == 1 {
			return dst
		}
	}
}

// appendGzipMember is b as a gzip member of its own.
func appendGzipMember(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return out.Bytes()
}

func adler32Update(adler uint32, b []byte) uint32 {
	// hash/adler32 cannot go on from a sum (its digest resumes only from
	// its own marshalled state), so the sum is carried here.
	const mod = 65521
	s1, s2 := adler&0xffff, adler>>16
	for len(b) > 0 {
		// 5552 bytes keep s2 within 32 bits before the modulo (zlib's NMAX).
		n := min(len(b), 5552)
		for _, x := range b[:n] {
			s1 += uint32(x)
			s2 += s1
		}
		s1 %= mod
		s2 %= mod
		b = b[n:]
	}
	return s2<<16 | s1
}

// brotliLastEmpty is a final, empty brotli meta-block (ISLAST and
// ISLASTEMPTY set) from a byte boundary.
const brotliLastEmpty = 0x03

// appendBrotliUncompressed appends b as uncompressed brotli meta-blocks
// (RFC 7932 section 9.2) from a byte boundary: ISLAST 0, MNIBBLES 4, MLEN-1
// in 16 bits, ISUNCOMPRESSED 1, padding to the byte, then the bytes.
func appendBrotliUncompressed(dst, b []byte) []byte {
	for len(b) > 0 {
		n := min(len(b), 1<<16)
		h := uint32(n-1)<<3 | 1<<19
		dst = append(dst, byte(h), byte(h>>8), byte(h>>16))
		dst = append(dst, b[:n]...)
		b = b[n:]
	}
	return dst
}

// appendZstdRawBlocks appends b as zstd raw blocks (RFC 8878 section
// 3.1.1.2), the last one marked last. A block may hold no more than the
// frame's window, which is at least 1 KiB.
func appendZstdRawBlocks(dst, b []byte) []byte {
	for {
		n := min(len(b), 1<<10)
		h := uint32(n) << 3
		if n == len(b) {
			h |= 1
		}
		dst = append(dst, byte(h), byte(h>>8), byte(h>>16))
		dst = append(dst, b[:n]...)
		b = b[n:]
		if len(b) == 0 {
			return dst
		}
	}
}

// zstdChecksummed reports whether the zstd frame that starts b carries a
// content checksum (its Frame_Header_Descriptor's bit 2).
func zstdChecksummed(b []byte) bool {
	return len(b) > 4 && binary.LittleEndian.Uint32(b) == 0xFD2FB528 && b[4]&0x04 != 0
}

// streamDecoder decodes a coded stream as its bytes come. The decoders
// read from an io.Reader and keep its first error, so that a source with
// nothing yet cannot say so: each runs on a goroutine of its own, reading
// from the decoder (its Read) what feed hands it. feed returns once the
// decoder used all of it and asks for more, with everything it decoded:
// the goroutine and the relay take turns, and never run at once.
type streamDecoder struct {
	in   chan []byte   // coded bytes; closed when the stream is over
	need chan struct{} // the decoder used all it was given
	done chan struct{} // closed when the goroutine returned
	// The goroutine's while it decodes, the relay's once feed returned.
	cur   []byte // what is left of the last feed
	fed   bool
	out   []byte // decoded since the last feed
	limit int    // the most one feed may decode
	err   error  // why the decoder stopped; read once done is closed
}

// errDecoderPanic: a decoder panicked on the upstream's bytes.
var errDecoderPanic = errors.New("proxy: the decoder panicked")

func newStreamDecoder(k coding, limit int) *streamDecoder {
	d := &streamDecoder{in: make(chan []byte), need: make(chan struct{}), done: make(chan struct{}), limit: limit}
	go d.run(k)
	return d
}

// feed hands raw to the decoder and returns what it decoded, valid until
// the next feed, and the error that stopped the decoder (io.EOF: the coded
// stream ended).
func (d *streamDecoder) feed(raw []byte) ([]byte, error) {
	d.out = d.out[:0]
	select {
	case d.in <- raw:
	case <-d.done:
		return nil, d.err
	}
	select {
	case <-d.need:
		return d.out, nil
	case <-d.done:
		return d.out, d.err
	}
}

// close ends the goroutine and waits for it.
func (d *streamDecoder) close() {
	close(d.in)
	<-d.done
}

// Read is the decoder's source.
func (d *streamDecoder) Read(p []byte) (int, error) {
	for len(d.cur) == 0 {
		if d.fed {
			d.need <- struct{}{}
		}
		b, ok := <-d.in
		if !ok {
			return 0, io.EOF
		}
		d.cur, d.fed = b, true
	}
	n := copy(p, d.cur)
	d.cur = d.cur[n:]
	return n, nil
}

func (d *streamDecoder) run(k coding) {
	defer close(d.done)
	defer func() {
		// A decoder's bug costs the inspection, never the process.
		if p := recover(); p != nil {
			d.err = errDecoderPanic
		}
	}()
	var r io.Reader
	switch k {
	case codingGzip:
		zr, err := gzip.NewReader(d)
		if err != nil {
			d.err = err
			return
		}
		r = zr
	case codingDeflate:
		zr, err := zlib.NewReader(d)
		if err != nil {
			d.err = err
			return
		}
		r = zr
	case codingBrotli:
		r = brotli.NewReader(d)
	default:
		zr, err := zstd.NewReader(d, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(uint64(d.limit)))
		if err != nil {
			d.err = err
			return
		}
		defer zr.Close()
		r = zr
	}
	// A Read that asks for more input returns in the next feed's turn, so
	// it reads into a buffer of its own, appended to out once it returned.
	buf := make([]byte, 16<<10)
	for {
		n, err := r.Read(buf)
		d.out = append(d.out, buf[:n]...)
		if len(d.out) > d.limit {
			d.err = errDecodedTooLarge
			return
		}
		if err != nil {
			d.err = err
			return
		}
	}
}

// zstdWalker finds where the units of a zstd stream end (RFC 8878 section
// 3.1): frame headers, blocks, checksums, skippable frames.
type zstdWalker struct {
	hdr     [14]byte // a header being read: magic and frame header, or a block's
	nh      int
	skip    int // bytes of the current unit still to come
	inFrame bool
	check   bool // the frame ends with a checksum
	bad     bool // not a zstd stream this walker reads
}

// walk reads b, the stream's next bytes, and returns the offset in b just
// after the last unit that ends in it, -1 if none does.
func (z *zstdWalker) walk(b []byte) int {
	last := -1
	for i := 0; i < len(b) && !z.bad; {
		if z.skip > 0 {
			n := min(z.skip, len(b)-i)
			z.skip -= n
			i += n
			if z.skip == 0 {
				last = i
			}
			continue
		}
		z.hdr[z.nh] = b[i]
		z.nh++
		i++
		if z.header() {
			z.nh = 0
			if z.skip == 0 {
				last = i
			}
		}
	}
	return last
}

// header reports whether hdr holds a whole header, and then sets skip to
// the bytes of the unit that follow it.
func (z *zstdWalker) header() bool {
	h := z.hdr[:z.nh]
	if z.inFrame {
		if len(h) < 3 {
			return false
		}
		v := uint32(h[0]) | uint32(h[1])<<8 | uint32(h[2])<<16
		z.skip = int(v >> 3)
		if v>>1&3 == 1 { // RLE: one byte repeated
			z.skip = 1
		}
		if v&1 == 1 {
			z.inFrame = false
			if z.check {
				z.skip += 4
			}
		}
		return true
	}
	if len(h) < 4 {
		return false
	}
	magic := binary.LittleEndian.Uint32(h)
	if magic&0xFFFFFFF0 == 0x184D2A50 { // skippable frame
		if len(h) < 8 {
			return false
		}
		z.skip = int(binary.LittleEndian.Uint32(h[4:]))
		return true
	}
	if magic != 0xFD2FB528 {
		z.bad = true
		return false
	}
	if len(h) < 5 {
		return false
	}
	fhd := h[4]
	n := 5 + [4]int{0, 1, 2, 4}[fhd&3] + [4]int{0, 2, 4, 8}[fhd>>6]
	if fhd&0x20 == 0 {
		n++ // Window_Descriptor
	} else if fhd>>6 == 0 {
		n++ // a single segment's one-byte content size
	}
	if len(h) < n {
		return false
	}
	z.inFrame, z.check, z.skip = true, fhd&0x04 != 0, 0
	return true
}
