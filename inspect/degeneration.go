package inspect

import (
	"strings"
	"unicode/utf8"
)

// How Degeneration finds repetition.
//
// Every byte is appended to a ring of the last Window bytes. A rolling hash of
// the last degK bytes, with digits folded to '0', is looked up in a small table
// that remembers where each hash last ended; a hit at distance d <= MaxPhrase
// whose bytes really match (hashes collide) makes d the candidate period. From
// then on each byte costs one comparison with the byte d earlier, which extends
// two runs: shapeRun (digits folded, "the same line shape") and exactRun (byte
// for byte). A mismatch drops the candidate and the next lookup finds a new
// one. The most recent occurrence of a k-gram is the nearest, so the detector
// locks onto the smallest period of a repetition, which is what gemini-cli's
// 50-char chunk counting approximates with more work. Everything is O(1) per
// byte except a verification and a bounded back-extension on each new lock.
//
// A run is judged against a threshold chosen by what repeats and where:
// character runs ("aaaa", period 1), word runs ("the the ", period below
// MinPhrase) and phrases (MinPhrase..MaxPhrase); prose or structured text
// (code fences tracked over the accumulated text, tables, lists, headings,
// quotes, indented code, JSON, lines of numbers); and units of words, of
// symbols, or of whitespace and divider characters. Structure raises the
// threshold, it never switches detection off: gemini-cli's exemptions left an
// identical table row repeated forever undetected (field notes, PRs #5144,
// #5820, #6893).

const (
	degK         = 16 // bytes hashed to find a candidate period
	degTableBits = 11
	degHashBase  = 0x01000193 // FNV prime, used as the polynomial base
	degElemMax   = 80         // longest Evidence.Element, in bytes
	degShortElem = 24         // short units are shown repeated up to this length

	scoreExact = 0.97 // byte-identical copies: the stream is cut on this
	scoreShape = 0.93 // copies differing only in digits
)

// DefaultStreamConfig returns the token_degeneration defaults documented on
// StreamConfig.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{
		MinPhrase:              20,
		MaxPhrase:              200,
		Repeats:                10,
		StructuredRepeats:      30,
		ShapeRepeats:           16,
		StructuredShapeRepeats: 300,
		CharRun:                100,
		WordRun:                12,
		StructuredRun:          1000,
		Window:                 4096,
		LooseWindow:            192,
	}
}

// normalized fills zero or negative fields from DefaultStreamConfig and keeps
// the fields consistent with each other, so any TOML input yields a working
// detector.
func (c StreamConfig) normalized() StreamConfig {
	def := DefaultStreamConfig()
	pick := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	c.MinPhrase = pick(c.MinPhrase, def.MinPhrase)
	c.MaxPhrase = pick(c.MaxPhrase, def.MaxPhrase)
	c.Repeats = max(pick(c.Repeats, def.Repeats), 2)
	c.StructuredRepeats = max(pick(c.StructuredRepeats, def.StructuredRepeats), 2)
	c.ShapeRepeats = max(pick(c.ShapeRepeats, def.ShapeRepeats), 2)
	c.StructuredShapeRepeats = max(pick(c.StructuredShapeRepeats, def.StructuredShapeRepeats), 2)
	c.CharRun = max(pick(c.CharRun, def.CharRun), 2)
	c.WordRun = max(pick(c.WordRun, def.WordRun), 2)
	c.StructuredRun = max(pick(c.StructuredRun, def.StructuredRun), 2)
	c.Window = pick(c.Window, def.Window)
	c.LooseWindow = min(max(pick(c.LooseWindow, def.LooseWindow), 4*looseSpan), looseRing)
	// The position table stores 16-bit positions, so distances must stay
	// well below 1<<16.
	c.MaxPhrase = min(c.MaxPhrase, 1<<14)
	c.MinPhrase = min(c.MinPhrase, c.MaxPhrase)
	c.Window = max(c.Window, 2*(c.MaxPhrase+degK))
	c.Window = min(c.Window, 1<<20)
	w := 64
	for w < c.Window {
		w <<= 1
	}
	c.Window = w
	return c
}

// Degeneration watches one stream of generated text (a choice's content or
// its reasoning, each with its own instance) for degenerate repetition: a
// phrase of MinPhrase..MaxPhrase bytes repeated back to back, lines of the
// same shape (differing only in numbers), character or word runs, blocks of
// lines longer than a phrase repeated back to back (see blockrep.go), and
// loose cycles: the same spans of words coming back with small variations
// and nothing new said (see loose.go).
//
// Memory is about Window + 4.5 KiB at creation (6.5 KiB when MaxPhrase is
// 256 or more), and 9 KiB more once the text
// could be a loose cycle or is longer than Window (see loose.go); Write
// allocates nothing else. A Degeneration is not safe for concurrent use.
// Reset makes it reusable for another stream, e.g. from a sync.Pool; it
// keeps what was allocated.
type Degeneration struct {
	// What each byte reads comes first, in the first three cache lines:
	// with thousands of open streams a stream's detector has left the
	// processor's caches by its next delta, and each line the delta
	// touches is a miss (docs/streams.md).
	fired bool

	// Markdown structure of the accumulated text.
	lead       bool  // still in the line's leading whitespace
	lineStruct bool  // the current line is a table row, list item, heading, fence...
	fence      bool  // inside a fenced code block
	tickChar   byte  // '`' or '~'
	json       int8  // 1: the stream starts with '{' or '[', -1: it does not, 0: unknown yet
	indent     uint8 // columns of leading whitespace, counted up to 4: all that is asked of them
	ticks      uint8 // fence characters seen at the start of the line

	buf  []byte // ring of the last len(buf) raw bytes
	mask int64
	// The k-gram table: hash slot -> end position where a k-gram of that
	// slot last ended, modulo 1<<8 when MaxPhrase < 1<<8 (table8), else
	// modulo 1<<16 (table16). Only an entry within MaxPhrase can lock,
	// and an older one that wraps into that distance never verifies:
	// bytes that repeat at distance d would have written the slot d bytes
	// ago, after it. So the narrower positions change no decision and halve
	// the table, which every open stream holds (docs/streams.md).
	table8  *[1 << degTableBits]uint8
	table16 *[1 << degTableBits]uint16
	pos     int64  // bytes written so far
	hash    uint32 // rolling hash of the last degK folded bytes (lookup keeps it ahead of pos in a batch)
	baseK   uint32 // degHashBase^degK, removes the byte leaving the k-gram

	period     int64 // candidate period; 0 when none
	lastStruct int64 // end position of the last byte in structured text

	loose looseCycles

	// cfg is read by every delta for its MaxPhrase, which lies in the
	// third line with the end of loose.
	cfg StreamConfig

	// What a locked period reads.
	class    unitClass
	shapeRun int64 // consecutive positions equal to the byte period earlier, digits folded
	checkAt  int64 // shapeRun below which no threshold can be met: check is skipped
	exactRun int64 // the same, byte for byte

	block blockRun

	shape     bool // fired on folded digits, not identical copies
	cycle     bool // fired on a loose cycle
	offset    int64
	count     int
	threshold int
	elem      [degElemMax]byte
	elemLen   int
}

// unitClass says what a repeated unit is made of; it is computed once per
// candidate period, when a run first gets long enough to matter.
type unitClass uint8

const (
	classUnknown unitClass = iota
	classWords             // has letters: prose thresholds apply outside structure
	classSymbols           // digits and punctuation: "0, 0, 0", "0x00, "
	classDivider           // whitespace, rules and box drawing
)

// NewDegeneration returns a detector for one stream. Zero fields of cfg take
// their defaults (DefaultStreamConfig).
func NewDegeneration(cfg StreamConfig) *Degeneration {
	cfg = cfg.normalized()
	d := &Degeneration{cfg: cfg, buf: make([]byte, cfg.Window), mask: int64(cfg.Window - 1)}
	if cfg.MaxPhrase < 1<<8 {
		d.table8 = new([1 << degTableBits]uint8)
	} else {
		d.table16 = new([1 << degTableBits]uint16)
	}
	d.baseK = 1
	for range degK {
		d.baseK *= degHashBase
	}
	d.loose.init(cfg.LooseWindow)
	d.Reset()
	return d
}

// Reset forgets the stream so the detector can watch a new one. The
// configuration and the buffers are kept.
func (d *Degeneration) Reset() {
	if d.table8 != nil {
		*d.table8 = [1 << degTableBits]uint8{}
	} else {
		*d.table16 = [1 << degTableBits]uint16{}
	}
	d.loose.reset()
	// Zeroed in place, then the kept fields restored: a composite literal
	// that kept them would be built whole on the caller's stack first.
	cfg, buf, mask, table8, table16, baseK, loose := d.cfg, d.buf, d.mask, d.table8, d.table16, d.baseK, d.loose
	*d = Degeneration{}
	d.cfg, d.buf, d.mask, d.table8, d.table16, d.baseK, d.loose = cfg, buf, mask, table8, table16, baseK, loose
	d.lead = true
}

// Write feeds the next text delta. It reports true once the stream is
// confidently degenerate; later calls keep returning true and ignore p.
// Deltas may split lines, fences and UTF-8 sequences anywhere: the result
// depends only on the concatenated text.
func (d *Degeneration) Write(p []byte) bool {
	if d.fired {
		return true
	}
	var dists [degBatch]uint16
	for len(p) > 0 {
		batch := p[:min(len(p), degBatch)]
		d.lookup(batch, &dists)
		if d.step(batch, &dists) {
			d.fired = true
			return true
		}
		p = p[len(batch):]
	}
	return false
}

// degBatch is the most bytes whose k-gram lookups are done together.
const degBatch = 64

// lookup does the k-gram table's work for batch, the bytes that follow
// those written so far: it advances the rolling hash over them and, for
// each byte that ends a k-gram, looks up the distance to where a k-gram of
// the same slot last ended and records the byte's own end there, in order,
// as step would one byte at a time. Into dists goes the distance step must
// verify with lock, or 0: for a byte that ends no k-gram, and for a
// distance lock would reject at once, beyond MaxPhrase, before the first
// k-gram, or to a byte that differs from this one (lock's first
// comparison; most distances are stale entries, so most bytes stop here).
// None of it depends on what step decides (a fired detector ignores the
// table, and the ring already holds every byte dist before the batch), so
// doing it first changes nothing; what it gains is memory parallelism.
// With thousands of open streams a stream's table and ring have left the
// cache by its next event, and each byte's lookup is a miss at a place
// only its hash knows: interleaved with step's work the misses come one
// after another, in this loop the processor has many in flight at once.
func (d *Degeneration) lookup(batch []byte, dists *[degBatch]uint16) {
	h, pos := d.hash, d.pos
	maxPhrase := int64(d.cfg.MaxPhrase)
	for i, c := range batch {
		var out byte
		switch at := pos + int64(i) - degK; {
		case i >= degK:
			out = foldDigit[batch[i-degK]]
		case at >= 0:
			out = foldDigit[d.buf[at&d.mask]]
		}
		h = h*degHashBase + uint32(foldDigit[c]) - uint32(out)*d.baseK
		end := pos + int64(i) + 1
		if end < degK {
			dists[i] = 0
			continue
		}
		slot := (h * 0x9E3779B1) >> (32 - degTableBits)
		var dist int64
		if d.table8 != nil {
			dist = int64(uint8(end) - d.table8[slot])
			d.table8[slot] = uint8(end)
		} else {
			dist = int64(uint16(end) - d.table16[slot])
			d.table16[slot] = uint16(end)
		}
		cand := uint16(0)
		if dist > 0 && dist <= maxPhrase && end-dist >= degK {
			o := byte(0)
			if at := int64(i) - dist; at >= 0 {
				o = batch[at]
			} else {
				o = d.buf[(pos+at)&d.mask]
			}
			if foldDigit[o] == foldDigit[c] {
				cand = uint16(dist)
			}
		}
		dists[i] = cand
	}
	d.hash = h
}

// step consumes batch, the bytes lookup has just looked up into dists, one
// at a time, and reports whether the stream is now degenerate. dists[i] is
// byte i's candidate period, 0 when it has none. The loop is here rather
// than in Write so that a byte costs no call.
func (d *Degeneration) step(batch []byte, dists *[degBatch]uint16) bool {
	for i, c := range batch {
		pos := d.pos
		if c != '\n' && !d.lead && d.ticks == 0 {
			// Past a line's start (its leading whitespace and fence
			// characters) a byte changes nothing of the structure but
			// lastStruct, as structure would find: most bytes stop here.
			if d.fence || d.lineStruct || d.json == 1 {
				d.lastStruct = pos + 1
			}
		} else {
			d.structure(c, pos)
		}
		d.buf[pos&d.mask] = c
		end := pos + 1
		d.pos = end
		if c == '\n' && d.endLine(pos) {
			return true
		}

		fire := false
		if d.period > 0 {
			o := d.buf[(pos-d.period)&d.mask]
			if foldDigit[o] == foldDigit[c] {
				d.shapeRun++
				if o == c {
					d.exactRun++
				} else {
					d.exactRun = 0
				}
				if d.shapeRun >= d.checkAt {
					fire = d.check()
				}
			} else {
				d.period, d.shapeRun, d.exactRun, d.class = 0, 0, 0, classUnknown
			}
		}
		// While a period is locked the text repeats exactly and the phrase
		// rules, with their structure-aware thresholds and exact offsets,
		// judge it; the loose rule covers what they cannot lock onto, in
		// prose only: code, tables, lists and JSON that repeat with
		// variations are what healthy answers are made of (wait and flag,
		// never a cut).
		if pos == int64(len(d.buf))-1 && d.loose.t == nil {
			// The next byte overwrites the first in the ring: the loose
			// table's last chance to see the whole text.
			d.growLoose(pos - 1)
		}
		if !d.loose.extend(c) && d.looseEnd(c, pos) && !fire && d.period == 0 &&
			d.lastStruct <= d.loose.windowStart(pos) {
			d.fireLoose()
			return true
		}
		if dist := int64(dists[i]); d.period == 0 && dist > 0 && d.lock(end, dist) {
			fire = d.check()
		}
		if fire {
			return true
		}
	}
	return false
}

// looseEnd ends the current word at byte c, at offset pos, and reports
// whether the words so far are a loose cycle. Before the loose table
// exists, the first whole window fills the precheck, and a window that
// could be a cycle makes the table.
func (d *Degeneration) looseEnd(c byte, pos int64) bool {
	fire := d.loose.endWord(c, pos)
	if !d.loose.fed && d.loose.t == nil && d.loose.words >= int64(d.loose.window) {
		d.fillPrecheck(pos)
	}
	if d.loose.suspect {
		fire = d.growLoose(pos)
	}
	return fire
}

// fillPrecheck replays the text up to offset last, the end of the word
// that completed the first window, into the loose-cycle precheck, which
// has not been fed until then (see loose.go). Without a table the ring
// still holds the whole text: the table is made before it wraps.
func (d *Degeneration) fillPrecheck(last int64) {
	d.loose.reset()
	d.loose.fed = true
	for x := int64(0); x <= last; x++ {
		if c := d.buf[x&d.mask]; !d.loose.extend(c) {
			d.loose.endWord(c, x)
		}
	}
}

// growLoose makes the loose-cycle table and replays the text up to offset
// last into it, from the ring, which still holds all of it; it reports
// whether the word that byte ended is a loose cycle.
func (d *Degeneration) growLoose(last int64) bool {
	d.loose.grow()
	fire := false
	for x := int64(0); x <= last; x++ {
		c := d.buf[x&d.mask]
		fire = !d.loose.extend(c) && d.loose.endWord(c, x)
	}
	return fire
}

// lock makes dist the candidate period if the last degK bytes really repeat
// at that distance (the hash table holds stale and colliding entries), and
// extends both runs backwards so that the copies before the lock count too.
// The extension is bounded by MaxPhrase, which keeps a new lock O(MaxPhrase).
func (d *Degeneration) lock(end, dist int64) bool {
	for j := int64(1); j <= degK; j++ {
		if foldDigit[d.buf[(end-j)&d.mask]] != foldDigit[d.buf[(end-j-dist)&d.mask]] {
			return false
		}
	}
	d.period, d.class = dist, classUnknown
	d.checkAt = d.minSpan(dist) - dist
	d.shapeRun = d.extend(end, dist, 0, degK+int64(d.cfg.MaxPhrase), true)
	d.exactRun = d.extend(end, dist, 0, d.shapeRun, false)
	return true
}

// extend counts how far back from end-run-1 the text keeps repeating at
// distance p, starting from a run of length run and stopping at limit
// positions, at the start of the stream or at the oldest byte in the ring.
func (d *Degeneration) extend(end, p, run, limit int64, fold bool) int64 {
	oldest := max(end-int64(len(d.buf)), 0)
	for run < limit {
		x := end - run - 1
		if x-p < oldest {
			break
		}
		a, b := d.buf[x&d.mask], d.buf[(x-p)&d.mask]
		if fold {
			a, b = foldDigit[a], foldDigit[b]
		}
		if a != b {
			break
		}
		run++
	}
	return run
}

// check decides whether the current run is degenerate. It is called for each
// byte that extends a run, so the common case returns after a comparison.
func (d *Degeneration) check() bool {
	p := d.period
	copies := (d.shapeRun + p) / p
	if copies < 2 || d.shapeRun < d.checkAt {
		return false
	}
	if d.class == classUnknown {
		d.class = d.classify(p)
	}
	// Units without words ("0, 0, ", "0x00, ") are data, not chanting.
	structured := d.class == classSymbols || d.json == 1 || d.lastStruct > d.pos-p
	exact := int((d.exactRun + p) / p)
	var need, needShape int
	switch {
	case d.class == classDivider:
		need = ceilDiv(d.cfg.StructuredRun, int(p))
	case p == 1 && d.json != 1 && d.lastStruct <= d.pos-p:
		need = d.cfg.CharRun // "aaaa", "!!!!"
	case int(p) < d.cfg.MinPhrase && structured:
		need = ceilDiv(d.cfg.StructuredRun, int(p))
	case int(p) < d.cfg.MinPhrase:
		need = max(d.cfg.WordRun, ceilDiv(d.cfg.CharRun, int(p)))
	case structured:
		need, needShape = d.cfg.StructuredRepeats, d.cfg.StructuredShapeRepeats
	default:
		need, needShape = d.cfg.Repeats, d.cfg.ShapeRepeats
	}
	switch {
	case exact >= need:
		d.fire(d.exactRun, exact, need, false)
		return true
	case needShape > 0 && int(copies) >= needShape:
		d.fire(d.shapeRun, int(copies), needShape, true)
		return true
	}
	return false
}

// minSpan is a lower bound of the bytes any threshold needs for period p, so
// that check can skip classification until a run could matter.
func (d *Degeneration) minSpan(p int64) int64 {
	switch {
	case p == 1:
		return int64(d.cfg.CharRun)
	case int(p) < d.cfg.MinPhrase:
		return max(int64(d.cfg.WordRun)*p, int64(d.cfg.CharRun))
	default:
		return int64(min(d.cfg.Repeats, d.cfg.ShapeRepeats)) * p
	}
}

// classify looks at the last p bytes, one copy of the unit. Multibyte UTF-8
// counts as letters except sequences led by 0xE2 (punctuation, arrows, box
// drawing) and four-byte ones (emoji), which count as symbols.
func (d *Degeneration) classify(p int64) unitClass {
	divider, words := true, false
	prev := d.buf[(d.pos-p-1)&d.mask] // the unit repeats, so its last byte precedes it
	for x := d.pos - p; x < d.pos; x++ {
		c := d.buf[x&d.mask]
		switch {
		case isLetter(c):
			divider = false
			if isLetter(prev) {
				words = true
			}
		case c >= 0xC2 && c <= 0xDF, c >= 0xE3 && c <= 0xEF:
			divider, words = false, true
		case c == 0xE2 || (c >= 0x80 && c <= 0xBF) || dividerByte[c]:
		default:
			divider = false
		}
		prev = c
	}
	switch {
	case words:
		return classWords
	case divider:
		return classDivider
	}
	return classSymbols
}

// fire records the detection: where the run began, its count and threshold,
// and one copy of the unit aligned with that start.
func (d *Degeneration) fire(run int64, count, threshold int, shape bool) {
	p := d.period
	run = d.extend(d.pos, p, run, int64(len(d.buf)), shape)
	start := d.pos - run - p
	start = d.align(start, p)
	d.offset, d.count, d.threshold, d.shape = start, max(count, int((run+p)/p)), threshold, shape
	// The last whole copy that starts in phase with start is in the ring.
	reps := 1
	if int(p) < degShortElem {
		reps = min(ceilDiv(degShortElem, int(p)), d.count)
	}
	d.setElem(start+((d.pos-p-start)/p)*p, p, reps)
}

// setElem copies reps copies of the unit of p bytes at offset s of the ring
// into the evidence, shortened to degElemMax bytes.
func (d *Degeneration) setElem(s, p int64, reps int) {
	unit := min(int(p), degElemMax)
	n := 0
	for r := 0; r < reps && n < degElemMax; r++ {
		for i := 0; i < unit && n < degElemMax; i++ {
			c := d.buf[(s+int64(i))&d.mask]
			if c < 0x20 || c == 0x7F {
				c = ' ' // evidence goes into headers and one-line notices
			}
			d.elem[n] = c
			n++
		}
	}
	d.elemLen = n
	if int(p) > degElemMax {
		d.elemLen = -n // shortened: Detection appends an ellipsis
	}
}

// fireLoose records a loose cycle: the offset is the start of the window of
// words that proved it (the cycle began at least two periods earlier), the
// evidence the span of words that came back Count times.
func (d *Degeneration) fireLoose() {
	d.cycle = true
	d.offset = d.loose.windowStart(d.pos)
	d.count, d.threshold = d.loose.t.count, looseMinPrior+1
	// The span ends before the byte that completed its last word.
	s := max(d.loose.spanStart(d.pos), d.pos-int64(len(d.buf)))
	d.setElem(s, d.pos-1-s, 1)
}

// align picks which rotation of the unit the offset and the evidence start
// with. Any rotation is a correct answer, since the run is periodic, but the
// exact start of the periodicity is often a byte or two early (the text before
// the loop ended like the unit does, e.g. ". " or a blank line). Within the
// first copy it prefers, in order: the start of a non-empty line, the start of
// a sentence, a word boundary; ties go to the earliest.
func (d *Degeneration) align(start, p int64) int64 {
	oldest := max(d.pos-int64(len(d.buf)), 1)
	best, bestScore := start, 0
	for k := int64(0); k < p; k++ {
		x := start + k - 1
		if x < oldest {
			continue
		}
		score := 0
		switch c := d.buf[x&d.mask]; {
		case c == '\n' && d.buf[(x+1)&d.mask] != '\n':
			score = 3
		case c == ' ' && x > oldest && strings.IndexByte(".!?", d.buf[(x-1)&d.mask]) >= 0:
			score = 2
		case c < 0x80 && !isLetter(c) && (c < '0' || c > '9'):
			score = 1
		}
		if score > bestScore {
			best, bestScore = start+k, score
			if score == 3 {
				break
			}
		}
	}
	return best
}

// Detection returns the finding once Write has reported true, and the zero
// Detection before. Evidence.Element is one copy of the repeated unit
// (shortened to about 80 bytes, control characters shown as spaces; short
// units repeated a few times), Count the copies seen and Threshold the count
// that fired.
func (d *Degeneration) Detection() Detection {
	if !d.fired {
		return Detection{}
	}
	n, cut := d.elemLen, false
	if n < 0 {
		n, cut = -n, true
	}
	b := d.elem[:n]
	if cut {
		// Back off to a rune boundary so the ellipsis does not follow half a rune.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[len(b)-1]); i++ {
			b = b[:len(b)-1]
		}
		if len(b) > 0 && !utf8.FullRune(b[len(b)-1:]) {
			b = b[:len(b)-1]
		}
	}
	elem := strings.ToValidUTF8(string(b), "")
	if cut {
		elem += "…"
	}
	score := scoreExact
	switch {
	case d.shape:
		score = scoreShape
	case d.cycle:
		score = scoreLoose
	}
	return Detection{
		Category: TokenDegeneration,
		Score:    score,
		Evidence: Evidence{Element: elem, Count: d.count, Threshold: d.threshold, NoProgress: true},
	}
}

// Offset is the byte offset in the stream's text where the degeneration
// began: the start of the first copy of the repeated unit that belongs to the
// degenerate run (as far back as the window reaches). It is 0 before Write
// has reported true.
func (d *Degeneration) Offset() int64 { return d.offset }

// structure follows the markdown structure of the accumulated text one byte
// at a time, so a fence or a table row split across deltas is still seen.
func (d *Degeneration) structure(c byte, pos int64) {
	switch {
	case c == '\n':
		if d.fence || d.lineStruct || d.json == 1 {
			d.lastStruct = pos + 1
		}
		d.lead, d.indent, d.lineStruct, d.ticks = true, 0, false, 0
		return
	case d.lead:
		switch c {
		case ' ':
			d.indent = min(d.indent+1, 4)
		case '\t':
			d.indent = 4
		case '\r':
		default:
			d.lead = false
			if d.json == 0 {
				d.json = -1
				if c == '{' || c == '[' {
					d.json = 1
				}
			}
			d.lineStruct = structuredLead[c]
			if (c == '`' || c == '~') && d.indent < 4 {
				d.tickChar, d.ticks = c, 1
			}
		}
		if d.indent >= 4 {
			d.lineStruct = true // indented code
		}
	case d.ticks > 0 && d.ticks < 3:
		if c != d.tickChar {
			d.ticks = 0
		} else if d.ticks++; d.ticks == 3 {
			d.fence = !d.fence
		}
	}
	if d.fence || d.lineStruct || d.json == 1 {
		d.lastStruct = pos + 1
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

var (
	// foldDigit maps every digit to '0' so that lines differing only in
	// numbers have the same shape.
	foldDigit [256]byte
	// structuredLead marks the first non-blank byte of lines that are
	// tables, lists, headings, quotes, fences, markup, JSON, dividers or
	// data (a leading digit: numbered lists, log lines, CSV rows). 0xE2
	// leads box drawing and typographic punctuation.
	structuredLead [256]bool
	// dividerByte marks ASCII bytes that make up rules and blank space.
	dividerByte [256]bool
)

func init() {
	for i := range foldDigit {
		foldDigit[i] = byte(i)
	}
	for c := '0'; c <= '9'; c++ {
		foldDigit[c] = '0'
		structuredLead[c] = true
	}
	for _, c := range []byte("|-*+#>{}[]<`~\"=_\xE2") {
		structuredLead[c] = true
	}
	for _, c := range []byte(" \t\r\n-=_*~+.#|:/\\<>^`") {
		dividerByte[c] = true
	}
}
