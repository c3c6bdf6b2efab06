package inspect

import (
	"slices"
	"strings"
)

// Similarity of argument and text strings: word and bigram hashes, Jaccard, Levenshtein.

// similarity is the Jaccard index of the word sets of a and b, blended
// with a character-level comparison for short strings where one changed
// character ("foo" vs "fo0") matters.
func (in *inspection) similarity(a, b string) float64 {
	if a == b {
		return 1
	}
	in.w.toks = wordHashes(in.w.toks[:0], a)
	// b is the latest call's arguments, compared with each call's before.
	if !sameString(b, in.w.simB) {
		in.w.simToks = wordHashes(in.w.simToks[:0], b)
		in.w.simB = b
	}
	j := jaccard(in.w.toks, in.w.simToks)
	if len(a) <= 64 && len(b) <= 64 {
		j = max(j, 1-float64(levenshtein(a, b))/float64(max(len(a), len(b))))
	}
	return j
}

// eachWordHash calls fn with the hash of each word of s, lower-cased, in
// order. Words are runs of word bytes and non-ASCII bytes.
func eachWordHash(s string, fn func(h uint64)) {
	for i := 0; i < len(s); {
		for i < len(s) && !isWordByte(s[i]) && s[i] < 0x80 {
			i++
		}
		j := i
		for j < len(s) && (isWordByte(s[j]) || s[j] >= 0x80) {
			j++
		}
		if j > i {
			fn(hashString(strings.ToLower(s[i:j])))
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

// bigramHashes appends the sorted hashes of consecutive word pairs.
func bigramHashes(dst []uint64, s string) []uint64 {
	var prev uint64
	have := false
	eachWordHash(s, func(h uint64) {
		if have {
			dst = append(dst, prev*31+h)
		}
		prev, have = h, true
	})
	slices.Sort(dst)
	return slices.Compact(dst)
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

// levenshtein is the edit distance of a and b (bytes), for len(a) <= 64,
// with Myers' bit-vector algorithm in Hyyrö's formulation: one column of
// the distance matrix per byte of b, held in two 64-bit words, instead of
// len(a)*len(b) cells. paramDrift compares every windowed call's
// arguments with the latest.
func levenshtein(a, b string) int {
	m := len(a)
	if m == 0 {
		return len(b)
	}
	var peq [256]uint64 // bit i set in peq[c]: a[i] == c
	for i := 0; i < m; i++ {
		peq[a[i]] |= 1 << i
	}
	pv, mv := ^uint64(0), uint64(0) // vertical +1 / -1 deltas
	last := uint64(1) << (m - 1)
	d := m
	for j := 0; j < len(b); j++ {
		eq := peq[b[j]]
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
