package inspect

// How Degeneration finds loose cycles.
//
// Under a repetition penalty a degenerate model does not repeat one phrase
// back to back: it cycles through the same hundred or so words with small
// variations, so no byte period holds long enough for the phrase rule. What
// survives the variations is that spans of several words keep coming back
// and that nothing new is said.
//
// The text is cut into words: runs of non-blank bytes that hold a letter, a
// digit or a non-ASCII byte ("|" and "-" alone are markup and skipped),
// split every looseWordMax bytes, and hashed without their punctuation.
// Every word, and every span of looseSpan words (a rolling hash of word
// hashes), is looked up in a small table that remembers per key where it
// last occurred and how many times it came back with gaps of at most
// looseGap words. Over the last LooseWindow words two counts are kept:
//
//   - recurring: words whose span had occurred at least looseMinPrior times
//     before, i.e. the span is back for the third time or more;
//   - novel: words that had not occurred within looseGap words.
//
// A loose cycle fires when at least 3/5 of the window recurs and at most
// looseNovelMax of its words are new. Rows and items that share a shape
// carry different values (ids, names, dates, numbers), so their long spans
// differ: the healthy tables, JSON arrays, logs, CSV, similar test functions
// and path lists in testdata/stream recur at most about 20% and bring new
// words in every row, while the recorded loose cycles recur at 90-100% with
// no new word; 3/5 still holds with one word in 20 changed on every pass.
// Two copies of a block (a list written twice) are not enough: the third
// occurrence is what counts. And the whole window must be prose (see
// Degeneration.step): in code, tables, lists and JSON, repetition with
// variations is healthy far more often than not. Text without blanks (CJK) is hashed in fixed
// 32-byte pieces, which only an exact period keeps aligned: there the phrase
// rule does the work.
//
// Work is O(1) per byte plus O(1) per word, and memory is fixed arrays
// (about 9 KiB). The table is 4-way set associative; collisions only ever
// hide repetition, they never invent it (a 12-bit tag keeps false matches
// near 1 in 4096).
//
// The table is made only when the text could be a loose cycle. Every open
// stream holds its detector (docs/streams.md), and most text never comes near a
// cycle: until then a 1 KiB bit set stands in for the table. It records a
// few bits of each key the table would hold (bucket and tag bits, so two
// keys the table would take for one set the same bit) and counts the words
// of the window whose span's bit was set already: a superset of the words
// the table would count as recurring. While that count stays below the
// threshold no cycle can fire, whatever the table would say. When it gets
// there, or before the ring of raw bytes would lose the start of the text,
// the table is made and the text so far, all still in the ring, is replayed
// into it (Degeneration.growLoose): from then on the state is the one an
// eager table would have, so every decision is the same
// (TestDegenerationLazyAndEagerAgree, FuzzDegeneration).
//
// The bit set itself waits for the window's first LooseWindow words, as no
// window can be judged before them: those words cost no bit set lookups,
// the misses of a stream's next delta once thousands are open, and a short
// answer never makes any. The word that completes the first window has the
// words so far, all still in the ring as well, replayed into the bit set
// (Degeneration.fillPrecheck), which leaves it as if it had seen every word.

const (
	looseSpan      = 8    // words per hashed span
	looseGap       = 1024 // most words between two occurrences that still count as coming back
	looseRing      = 256  // words whose window flags and offsets are kept (>= the largest window)
	looseTableBits = 11
	looseWays      = 4  // entries per bucket
	looseWordMax   = 32 // bytes; longer runs (URLs, CJK without spaces) are split
	looseMinPrior  = 2  // earlier occurrences that make a span recur
	looseNovelMax  = 2  // new words tolerated in a window
	looseSpanMix   = 0x9E3779B1
	looseFNV       = 0x01000193
	looseFNVInit   = 0x811C9DC5
	looseSpanSeed  = 0x5BD1E995 // keeps span keys apart from word keys

	scoreLoose = 0.95
)

// A table entry packs, from the high bits down: a 12-bit tag of the key, a
// 4-bit count of occurrences (saturating) and the 16-bit word index of the
// last one. Zero is an empty entry.
const (
	looseTagMask   = 0xFFF00000
	looseCountMask = 0xF << 16
	loosePosMask   = 0xFFFF
)

// looseFlag bits describe one word of the window.
const (
	looseNovel     = 1 << iota // the word had not occurred within looseGap words
	looseRecurring             // its span had occurred looseMinPrior times or more
)

// looseCycles is the state of the loose-cycle rule for one stream.
type looseCycles struct {
	// Each byte or word reads all of it (see Degeneration).
	word    uint32 // FNV-1a of the current word so far
	span    uint32 // rolling hash of the last looseSpan words
	spanOut uint32 // looseSpanMix^looseSpan, removes the word leaving the span
	alnum   bool   // the current word holds a letter, digit or non-ASCII byte
	// suspect: pre's count reached the threshold at the last word; the
	// table must be made before the next word is judged.
	suspect bool
	fed     bool  // pre has been fed every word so far (see above)
	wordLen uint8 // at most looseWordMax
	words   int64 // words counted so far

	// t is the table, nil until the text could be a loose cycle; pre
	// stands in for it until then.
	t   *looseTable
	pre *loosePrecheck

	last   [looseSpan]uint32 // hashes of the last looseSpan words
	window int               // words judged together (StreamConfig.LooseWindow)
}

// looseTable is the loose-cycle rule's memory of past words, and its counts
// over the window, which only the table makes.
type looseTable struct {
	keys      [1 << looseTableBits]uint32
	novel     int               // novel words among the last window words
	recurring int               // recurring words among the last window words
	count     int               // occurrences of the span that fired, itself included
	flags     [looseRing]uint8  // per recent word: looseFlag bits
	starts    [looseRing]uint32 // per recent word: low 32 bits of the offset of its first byte
}

// loosePrecheck stands in for the table until the text could be a loose
// cycle (see above).
type loosePrecheck struct {
	seen [1 << looseSeenBits / 64]uint64 // keys stored so far, by looseSeenKey
	hit  [looseRing / 64]uint64          // per recent word: its span's key was seen before
	hits int                             // words with hit set among the last window words
}

// looseSeenBits is the bits of a key the precheck keeps: the table's
// bucket bits (2..10) and the low 4 bits of its tag (20..23).
const looseSeenBits = looseTableBits - 2 + 4

func looseSeenKey(h uint32) uint32 {
	return h>>2&(1<<(looseTableBits-2)-1) | (h>>20&0xF)<<(looseTableBits-2)
}

func (l *looseCycles) init(window int) {
	l.window = window
	l.spanOut = 1
	for range looseSpan {
		l.spanOut *= looseSpanMix
	}
	l.pre = new(loosePrecheck)
	l.reset()
}

func (l *looseCycles) reset() {
	if l.t != nil {
		l.t.keys = [1 << looseTableBits]uint32{}
		l.t.novel, l.t.recurring, l.t.count = 0, 0, 0
	} else if l.fed {
		// Unfed, it was never written: a short answer leaves its lines alone.
		*l.pre = loosePrecheck{}
	}
	// Zeroed in place (see Degeneration.Reset), the kept fields restored.
	t, pre, window, spanOut := l.t, l.pre, l.window, l.spanOut
	*l = looseCycles{}
	l.t, l.pre, l.window, l.spanOut, l.word = t, pre, window, spanOut, looseFNVInit
}

// grow makes the table and forgets the text, which the caller replays.
func (l *looseCycles) grow() {
	l.t, l.pre = new(looseTable), nil
	l.reset()
}

// extend adds c to the current word and reports true, or reports false when
// c ends the word and endWord must be called. It is small enough to be
// inlined: most bytes stop here.
func (l *looseCycles) extend(c byte) bool {
	k := byteKind[c]
	if k == kindBlank || l.wordLen == looseWordMax-1 {
		return false
	}
	l.wordLen++
	// Only letters and digits are hashed: "restarts." and "restarts" are
	// one word, as a variation in punctuation says nothing new.
	if k == kindWord {
		l.word = (l.word ^ uint32(c)) * looseFNV
		l.alnum = true
	}
	return true
}

// endWord ends the current word at byte c, at offset pos: a blank, or the
// byte that makes the word looseWordMax bytes long and is part of it. It
// reports whether the words so far are a loose cycle.
func (l *looseCycles) endWord(c byte, pos int64) bool {
	end := pos // the word's bytes are contiguous and end before end
	if k := byteKind[c]; k != kindBlank {
		end++
		l.wordLen++
		if k == kindWord {
			l.word = (l.word ^ uint32(c)) * looseFNV
			l.alnum = true
		}
	}
	if l.wordLen == 0 {
		return false
	}
	fire := l.alnum && l.push(mix32(l.word), end-int64(l.wordLen))
	l.word, l.wordLen, l.alnum = looseFNVInit, 0, false
	return fire
}

// push counts one word and judges the window that ends with it.
func (l *looseCycles) push(w uint32, start int64) bool {
	i := l.words
	k := i % looseSpan
	l.span = l.span*looseSpanMix + w - l.last[k]*l.spanOut
	l.last[k] = w
	if l.t == nil {
		l.words = i + 1
		if l.fed {
			l.suspect = l.pre.push(i, w, l.span, l.window)
		}
		return false
	}
	t := l.t
	if i >= int64(l.window) {
		f := t.flags[(i-int64(l.window))%looseRing]
		t.novel -= int(f & looseNovel)
		t.recurring -= int(f&looseRecurring) >> 1
	}

	var f uint8
	if l.remember(w) == 0 {
		f |= looseNovel
		t.novel++
	}
	spanPrior := 0
	if i >= looseSpan-1 {
		spanPrior = l.remember(mix32(l.span ^ looseSpanSeed))
		if spanPrior >= looseMinPrior {
			f |= looseRecurring
			t.recurring++
		}
	}
	t.flags[i%looseRing] = f
	t.starts[i%looseRing] = uint32(start)
	l.words = i + 1

	if f&looseRecurring == 0 || l.words < int64(l.window) ||
		t.recurring*5 < l.window*3 || t.novel > looseNovelMax {
		return false
	}
	t.count = spanPrior + 1
	return true
}

// push records word i (hash w, span the rolling hash of the span that ends
// with it) as the table would, and reports whether the window that ends
// with it could be a loose cycle: the same conditions as looseCycles.push,
// with hit for recurring.
func (p *loosePrecheck) push(i int64, w, span uint32, window int) bool {
	if i >= int64(window) {
		j := (i - int64(window)) % looseRing
		p.hits -= int(p.hit[j/64] >> (j % 64) & 1)
	}
	// The table stores the word's key first: the span's lookup may find it.
	p.see(mix32(w))
	hit := false
	if i >= looseSpan-1 {
		hit = p.see(mix32(span ^ looseSpanSeed))
	}
	j := i % looseRing
	p.hit[j/64] &^= 1 << (j % 64)
	if hit {
		p.hit[j/64] |= 1 << (j % 64)
		p.hits++
	}
	return hit && i+1 >= int64(window) && p.hits*5 >= window*3
}

// see records key h and reports whether a key with the same seen bits was
// recorded before.
func (p *loosePrecheck) see(h uint32) bool {
	k := looseSeenKey(h)
	was := p.seen[k/64]>>(k%64)&1 != 0
	p.seen[k/64] |= 1 << (k % 64)
	return was
}

// remember records an occurrence of key h at the current word and returns
// how many times it occurred before in a chain of gaps of at most looseGap
// words (saturating at 15).
func (l *looseCycles) remember(h uint32) int {
	now := uint32(l.words) & loosePosMask
	tag := h & looseTagMask
	bucket := l.t.keys[h&(1<<looseTableBits-1)&^(looseWays-1):][:looseWays]
	var e *uint32
	oldest := -1
	for j := range bucket {
		if x := bucket[j]; x != 0 && x&looseTagMask == tag {
			e = &bucket[j]
			break
		}
		if oldest < 0 || bucket[j] == 0 || bucket[oldest] != 0 && l.age(bucket[j]) > l.age(bucket[oldest]) {
			oldest = j
		}
	}
	if e == nil {
		// A new key takes an empty entry or one not seen for looseRing
		// words. In a full bucket of live keys it is not stored: the keys
		// of a cycle keep their places instead of evicting each other
		// round after round.
		if x := bucket[oldest]; x != 0 && l.age(x) <= looseRing {
			return 0
		}
		e = &bucket[oldest]
		*e = 0
	}
	prior := int(*e&looseCountMask) >> 16
	if *e == 0 || l.age(*e) > looseGap {
		prior = 0
	}
	count := min(prior+1, 15)
	*e = tag | uint32(count)<<16 | now
	return prior
}

// age is how many words ago entry e last occurred (modulo 1<<16).
func (l *looseCycles) age(e uint32) uint32 {
	return (uint32(l.words) - e) & loosePosMask
}

// windowStart is the offset of the first word of the window that fired,
// given the offset pos of a byte at most 4 GiB later.
func (l *looseCycles) windowStart(pos int64) int64 {
	return l.offset(l.words-int64(l.window), pos)
}

// spanStart is the offset of the first word of the span that fired.
func (l *looseCycles) spanStart(pos int64) int64 {
	return l.offset(l.words-looseSpan, pos)
}

func (l *looseCycles) offset(word, pos int64) int64 {
	return pos - int64(uint32(pos)-l.t.starts[word%looseRing])
}

// mix32 spreads a 32-bit hash over all bits (the murmur3 finalizer), so that
// both the table bucket (low bits) and the tag (high bits) are well
// distributed.
func mix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85EBCA6B
	h ^= h >> 13
	h *= 0xC2B2AE35
	h ^= h >> 16
	return h
}

// byteKind sorts bytes for word splitting: blanks separate words, letters,
// digits and any byte of a multibyte UTF-8 sequence make a run of non-blank
// bytes a word (and are hashed), other bytes (punctuation, markup) are part
// of a word but not of its hash.
var byteKind [256]uint8

const (
	kindOther uint8 = iota
	kindWord
	kindBlank
)

func init() {
	for c := 0; c < 256; c++ {
		if c >= 0x80 || isLetter(byte(c)) || c >= '0' && c <= '9' {
			byteKind[c] = kindWord
		}
	}
	for _, c := range []byte(" \t\r\n\f\v") {
		byteKind[c] = kindBlank
	}
}
