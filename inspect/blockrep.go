package inspect

// How Degeneration finds a repeated block.
//
// A block longer than MaxPhrase (a heading and its list, a paragraph with
// a table) that a model writes again and again back to back has a period
// the byte rule cannot lock onto, and a list or a heading is structure,
// which the loose rule leaves alone. So whole lines are compared too: each
// non-blank line, once ended, is hashed and kept in a small ring, and a
// line equal to the one p lines earlier (p up to blockLines) locks a period
// that every following line must keep. Blank lines are skipped, so a block
// with blank lines inside has no false shorter period. Work is one pass
// over each line's bytes at its end, and blockLines comparisons when no
// period is locked; memory is fixed arrays.

const (
	// blockLines is the longest block, in non-blank lines, that the rule
	// sees repeating.
	blockLines = 12
	// blockRing holds the lines of the copies that prove a repetition
	// (need copies of blockLines lines) where it can.
	blockRing = 64
)

// blockRun follows the lines of one stream.
type blockRun struct {
	// Every line reads these, which share a cache line.
	lineStart int64 // offset where the current line began
	n         int64 // non-blank lines seen
	period    int64 // candidate period in lines; 0 when none
	run       int64 // lines equal to the line period earlier, in a row

	hash  [blockRing]uint32 // the last non-blank lines' hashes, by index mod blockRing
	start [blockRing]int64  // and their start offsets
}

// blockRepeats is how many back-to-back copies of a block make it
// degenerate: a third of the phrase counts (4 by default in prose, 10 in
// code and JSON), since each copy is longer than any phrase.
func (d *Degeneration) blockRepeats() int {
	if d.fence || d.json == 1 {
		return max(3, ceilDiv(d.cfg.StructuredRepeats, 3))
	}
	return max(3, ceilDiv(d.cfg.Repeats, 3))
}

// endLine ends the line before the '\n' at offset pos and reports whether
// the stream now repeats a block of lines degenerately; it records the
// detection when it does.
func (d *Degeneration) endLine(pos int64) bool {
	b := &d.block
	from := b.lineStart
	b.lineStart = pos + 1
	if pos-from >= int64(len(d.buf)) {
		// Longer than the ring: no copy of it can be compared.
		b.period, b.run = 0, 0
		from = pos
	}
	h, blank := newFNV(), true
	for x := from; x < pos; x++ {
		c := d.buf[x&d.mask]
		if c != ' ' && c != '\t' && c != '\r' {
			blank = false
		}
		h = h.byte(c)
	}
	if blank {
		return false
	}
	line := uint32(h) ^ uint32(h>>32)
	i := b.n % blockRing
	b.hash[i], b.start[i] = line, from
	b.n++
	if b.period > 0 {
		if b.hash[(b.n-1-b.period)%blockRing] == line {
			b.run++
		} else {
			b.period, b.run = 0, 0
		}
	}
	if b.period == 0 {
		for p := int64(1); p <= blockLines && p < b.n; p++ {
			if b.hash[(b.n-1-p)%blockRing] == line {
				b.period, b.run = p, 1
				break
			}
		}
		if b.period == 0 {
			return false
		}
	}
	p := b.period
	copies := (b.run + p) / p
	last := b.start[(b.n-p)%blockRing] // the latest whole copy
	size := pos + 1 - last
	need := d.blockRepeats()
	if size <= int64(d.cfg.MaxPhrase) || copies < int64(need) {
		return false // a short unit is the byte rule's
	}
	first := b.n - (copies * p)
	if first < b.n-blockRing {
		first = b.n - blockRing // as far back as the ring reaches
	}
	d.offset, d.count, d.threshold = b.start[first%blockRing], int(copies), need
	d.setElem(last, size, 1)
	return true
}
