package inspect

import (
	"slices"
	"strings"
)

// Similarity of argument and text strings: word and bigram hashes, Jaccard, Levenshtein.

// similarity is the Jaccard index of the word sets of a and b, blended
// with a character-level comparison for short strings where one changed
// character ("foo" vs "fo0") matters. b is the latest call's arguments,
// compared with each call's before: its word hashes and its levenshtein
// pattern are kept from one comparison to the next.
func (in *inspection) similarity(a, b string) float64 {
	if a == b {
		return 1
	}
	j := in.wordSimilarity(a, b)
	if len(a) <= 64 && len(b) <= 64 {
		j = max(j, in.charSimilarity(a, b))
	}
	return j
}

// similar reports whether similarity(a, b) >= thr, computing no more
// than decides it: the character comparison of short strings first, the
// word sets only when it falls short.
func (in *inspection) similar(a, b string, thr float64) bool {
	if a == b {
		return 1 >= thr
	}
	if len(a) <= 64 && len(b) <= 64 && in.charSimilarity(a, b) >= thr {
		return true
	}
	return in.wordSimilarity(a, b) >= thr
}

// wordSimilarity is the Jaccard index of the word sets of a and b.
func (in *inspection) wordSimilarity(a, b string) float64 {
	in.w.toks = wordHashes(in.w.toks[:0], a)
	if !sameString(b, in.w.simB) {
		in.w.simToks = wordHashes(in.w.simToks[:0], b)
		in.w.simB = b
	}
	return jaccard(in.w.toks, in.w.simToks)
}

// charSimilarity is one less the edit distance of a and b over the longer
// length, for len(a), len(b) <= 64 and not both empty. The distance is
// symmetric: b, the same for many a, is the pattern.
func (in *inspection) charSimilarity(a, b string) float64 {
	in.w.lev.set(b)
	return 1 - float64(in.w.lev.distance(a))/float64(max(len(a), len(b)))
}

// eachWordHash calls fn with the hash of each word of s, lower-cased, in
// order. Words are runs of word bytes and non-ASCII bytes.
func eachWordHash(s string, fn func(h uint64)) {
	for i := 0; i < len(s); {
		for i < len(s) && !isWordByte(s[i]) && s[i] < 0x80 {
			i++
		}
		// An ASCII word is lowered as it is hashed; another goes through
		// strings.ToLower.
		j, h, ascii := i, newFNV(), true
		for j < len(s) && (isWordByte(s[j]) || s[j] >= 0x80) {
			ascii = ascii && s[j] < 0x80
			h = h.byte(lowerASCII(s[j]))
			j++
		}
		if j > i {
			if !ascii {
				h = newFNV().str(strings.ToLower(s[i:j]))
			}
			fn(uint64(h))
		}
		i = j
	}
}

// wordHashes appends the sorted, deduplicated hashes of the words of s.
func wordHashes(dst []uint64, s string) []uint64 {
	eachWordHash(s, func(h uint64) { dst = append(dst, h) })
	slices.Sort(dst)
	return slices.Compact(dst)
}

// wordAndBigramHashes appends the sorted, deduplicated hashes of the
// words of s to words (as wordHashes) and of its consecutive word pairs
// to bigrams, in one pass over s.
func wordAndBigramHashes(words, bigrams []uint64, s string) ([]uint64, []uint64) {
	var prev uint64
	have := false
	eachWordHash(s, func(h uint64) {
		words = append(words, h)
		if have {
			bigrams = append(bigrams, prev*31+h)
		}
		prev, have = h, true
	})
	slices.Sort(words)
	slices.Sort(bigrams)
	return slices.Compact(words), slices.Compact(bigrams)
}

func jaccard(a, b []uint64) float64 {
	if len(a) == 0 && len(b) == 0 {
		return 1
	}
	i, j, inter := 0, 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			inter++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// levenshtein is the edit distance of a and b (bytes), for len(a) <= 64.
func levenshtein(a, b string) int {
	var p levPattern
	p.set(a)
	return p.distance(b)
}

// levPattern is a string of at most 64 bytes ready for levenshtein: bit i
// of peq[c] is set where s[i] == c.
type levPattern struct {
	s   string
	peq [256]uint64
}

// set makes s the pattern, clearing only the previous pattern's bytes.
// A pattern kept from an earlier set must be of memory still holding the
// same string (Inspect sets "" when it ends).
func (p *levPattern) set(s string) {
	if sameString(s, p.s) {
		return
	}
	for i := 0; i < len(p.s); i++ {
		p.peq[p.s[i]] = 0
	}
	for i := 0; i < len(s); i++ {
		p.peq[s[i]] |= 1 << i
	}
	p.s = s
}

// distance is the edit distance of the pattern and b, with Myers'
// bit-vector algorithm in Hyyrö's formulation: one column of the distance
// matrix per byte of b, held in two 64-bit words, instead of len(a)*len(b)
// cells. paramDrift compares every windowed call's arguments with the
// latest.
func (p *levPattern) distance(b string) int {
	m := len(p.s)
	if m == 0 {
		return len(b)
	}
	pv, mv := ^uint64(0), uint64(0) // vertical +1 / -1 deltas
	last := uint64(1) << (m - 1)
	d := m
	for j := 0; j < len(b); j++ {
		eq := p.peq[b[j]]
		xv := eq | mv
		xh := ((eq & pv) + pv) ^ pv | eq
		ph := mv | ^(xh | pv)
		mh := pv & xh
		if ph&last != 0 {
			d++
		} else if mh&last != 0 {
			d--
		}
		ph = ph<<1 | 1 // row 0 grows by one per column
		mh <<= 1
		pv = mh | ^(xv | ph)
		mv = ph & xv
	}
	return d
}
