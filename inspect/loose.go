package inspect

// How Degeneration finds loose cycles.
//
// Under a repetition penalty a degenerate model does not repeat one phrase
// back to back: it cycles through the same hundred or so words with small
// variations, so no byte period holds long enough for the phrase rule. What
// survives the variations is that spans of several words keep coming back
// and that nothing new is said. The text is cut into words (runs of
// non-blank bytes holding a letter, a digit or a non-ASCII byte; markup such
// as "|" or "-" is skipped, longer words are split every looseWordMax bytes),
// and a bounded count table remembers, over the last looseHistory words, how
// often each word and each span of looseSpan words (a rolling hash of word
// hashes) occurred. Over the last Window words two shares are kept:
//
//   - recurring: words whose looseSpan-word span had already occurred at
//     least looseMinPrior times, i.e. the span is back for the third time;
//   - novel: words not seen at all in the history.
//
// A loose cycle fires when at least 4/5 of the window recurs and at most
// looseNovelMax of its words are new. Rows and items that share a shape
// carry different values (ids, names, dates, numbers), so their long spans
// differ: the healthy tables, JSON arrays, logs, CSV, similar test functions
// and path lists in testdata/stream recur at most 21% and bring new words
// in every row, while the recorded loose cycles recur at 90-100% with no new
// word. Two copies of a block (a list written twice) are not enough: the
// third occurrence is what counts. All work is O(1) per byte plus O(1) per
// word; memory is fixed arrays inside Degeneration.

const (
	looseSpan      = 8    // words per hashed span
	looseHistory   = 1024 // words remembered by the count table; a cycle's period must fit twice
	looseRing      = 256  // words whose window flags and start offsets are kept (>= the largest window)
	looseTableBits = 12
	looseWordMax   = 32 // bytes; longer runs (URLs, CJK without spaces) are split
	looseMinPrior  = 2  // earlier occurrences that make a span recur
	looseNovelMax  = 2  // new words tolerated in a window
	looseSpanMix   = 0x9E3779B1
	looseFNV       = 0x01000193
	looseFNVInit   = 0x811C9DC5

	scoreLoose = 0.95
)

// looseFlag bits describe one word of the history.
const (
	looseNovel     = 1 << iota // the word had not occurred in the history
	looseRecurring             // its span had occurred looseMinPrior times or more
	looseSpanHeld              // its span was counted in the table (no collision)
	looseWordHeld              // the word was counted in the table (no collision)
)

// looseCycles is the state of the loose-cycle rule for one stream.
type looseCycles struct {
	window int // words judged together (StreamConfig.LooseWindow)

	word    uint32 // FNV-1a of the current word so far
	wordLen int
	alnum   bool  // the current word holds a letter, digit or non-ASCII byte
	start   int64 // offset of the current word's first byte

	words     int64  // words counted so far
	span      uint32 // rolling hash of the last looseSpan word hashes
	spanOut   uint32 // looseSpanMix^looseSpan, removes the word leaving the span
	novel     int    // novel words among the last window words
	recurring int    // recurring words among the last window words

	table  [1 << looseTableBits]uint32 // key hash -> tag (high 16 bits) and count (low 16 bits)
	hashes [looseHistory][2]uint32     // per word of the history: word hash, span hash
	flags  [looseHistory]uint8         // per word of the history: looseFlag bits
	starts [looseRing]int64            // per recent word: offset of its first byte

	count int // occurrences of the span that fired, itself included
}

func (l *looseCycles) init(window int) {
	l.window = window
	l.spanOut = 1
	for range looseSpan {
		l.spanOut *= looseSpanMix
	}
	l.reset()
}

func (l *looseCycles) reset() {
	l.word, l.wordLen, l.alnum = looseFNVInit, 0, false
	l.words, l.span, l.novel, l.recurring, l.count = 0, 0, 0, 0, 0
	l.table = [1 << looseTableBits]uint32{}
}

// step consumes byte c at offset pos and reports whether the words so far
// are a loose cycle.
func (l *looseCycles) step(c byte, pos int64) bool {
	if !blankByte[c] {
		if l.wordLen == 0 {
			l.start = pos
		}
		l.word = (l.word ^ uint32(c)) * looseFNV
		l.wordLen++
		l.alnum = l.alnum || wordByte[c]
		if l.wordLen < looseWordMax {
			return false
		}
	} else if l.wordLen == 0 {
		return false
	}
	fire := l.alnum && l.push(mix32(l.word), l.start)
	l.word, l.wordLen, l.alnum = looseFNVInit, 0, false
	return fire
}

// push counts one word and judges the window that ends with it.
func (l *looseCycles) push(w uint32, start int64) bool {
	i := l.words
	slot := i % looseHistory
	if i >= looseHistory {
		old := l.hashes[slot]
		f := l.flags[slot]
		if f&looseWordHeld != 0 {
			l.forget(old[0])
		}
		if f&looseSpanHeld != 0 {
			l.forget(old[1])
		}
	}
	if i >= int64(l.window) {
		f := l.flags[(i-int64(l.window))%looseHistory]
		l.novel -= int(f & looseNovel)
		l.recurring -= int(f&looseRecurring) >> 1
	}
	var out uint32
	if i >= looseSpan {
		out = l.hashes[(i-looseSpan)%looseHistory][0]
	}
	l.span = l.span*looseSpanMix + w - out*l.spanOut

	var f uint8
	prior, held := l.remember(w)
	if held {
		f |= looseWordHeld
	}
	if prior == 0 {
		f |= looseNovel
		l.novel++
	}
	s := mix32(l.span ^ 0x5bd1e995) // keeps span keys apart from word keys
	spanPrior := 0
	if i >= looseSpan-1 {
		spanPrior, held = l.remember(s)
		if held {
			f |= looseSpanHeld
		}
		if spanPrior >= looseMinPrior {
			f |= looseRecurring
			l.recurring++
		}
	}
	l.hashes[slot] = [2]uint32{w, s}
	l.flags[slot] = f
	l.starts[i%looseRing] = start
	l.words = i + 1

	if f&looseRecurring == 0 || l.words < int64(l.window) {
		return false
	}
	if l.recurring*5 < l.window*4 || l.novel > looseNovelMax {
		return false
	}
	l.count = spanPrior + 1
	return true
}

// remember counts key h and returns how often it occurred before. A slot
// held by another key is left alone and the key reads as new: collisions
// only ever hide repetition, they never invent it.
// Counts never exceed looseHistory, so they fit the low 16 bits.
func (l *looseCycles) remember(h uint32) (prior int, held bool) {
	e, tag := l.entry(h)
	switch {
	case *e&0xFFFF == 0:
		*e = tag | 1
		return 0, true
	case *e&^0xFFFF != tag:
		return 0, false
	}
	prior = int(*e & 0xFFFF)
	*e++
	return prior, true
}

// forget removes one occurrence of key h as it leaves the history.
func (l *looseCycles) forget(h uint32) {
	if e, tag := l.entry(h); *e&^0xFFFF == tag && *e&0xFFFF > 0 {
		*e--
	}
}

// entry is the table slot of key h (its high bits) and the tag that tells
// keys sharing the slot apart (its low 16 bits, moved up).
func (l *looseCycles) entry(h uint32) (*uint32, uint32) {
	return &l.table[h>>(32-looseTableBits)], h << 16
}

// windowStart is the offset of the first word of the window that fired.
func (l *looseCycles) windowStart() int64 {
	return l.starts[(l.words-int64(l.window))%looseRing]
}

// spanStart is the offset of the first word of the span that fired.
func (l *looseCycles) spanStart() int64 {
	return l.starts[(l.words-looseSpan)%looseRing]
}

// mix32 spreads a 32-bit hash over all bits (the murmur3 finalizer), so that
// both the table slot (high bits) and the tag are well distributed.
func mix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85EBCA6B
	h ^= h >> 13
	h *= 0xC2B2AE35
	h ^= h >> 16
	return h
}

var (
	// blankByte marks the bytes that separate words.
	blankByte [256]bool
	// wordByte marks the bytes that make a run of non-blank bytes a word:
	// letters, digits and any byte of a multibyte UTF-8 sequence.
	wordByte [256]bool
)

func init() {
	for _, c := range []byte(" \t\r\n\f\v") {
		blankByte[c] = true
	}
	for c := 0; c < 256; c++ {
		wordByte[c] = c >= 0x80 || isLetter(byte(c)) || c >= '0' && c <= '9'
	}
}
