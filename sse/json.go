package sse

import (
	"strings"
	"unicode/utf8"
)

// The helpers below walk JSON that jsonvalid.Valid has already accepted. They
// exist because every gjson accessor unescapes each string value it touches
// into a new string, and the strings of a chunk (content, tool arguments) are
// exactly the ones that carry escapes. Walking raw tokens and unescaping
// straight into the accumulator's buffers keeps Add allocation-free. They
// stay in bounds on any input, valid or not.

// objIter iterates the members of a JSON object.
type objIter struct {
	s        string
	i        int
	key, val string // key without quotes, not unescaped; val is the raw token
}

func newObjIter(raw string) objIter {
	i := skipWS(raw, 0)
	if i < len(raw) && raw[i] == '{' {
		return objIter{s: raw, i: i + 1}
	}
	return objIter{s: raw, i: len(raw)}
}

func (it *objIter) next() bool {
	s := it.s
	i := skipSep(s, it.i)
	if i >= len(s) || s[i] != '"' {
		it.i = len(s)
		return false
	}
	k := stringEnd(s, i)
	it.key = s[i+1 : max(i+1, k-1)]
	i = skipWS(s, k)
	if i < len(s) && s[i] == ':' {
		i++
	}
	i = skipWS(s, i)
	end := valueEnd(s, i)
	it.val = s[i:end]
	it.i = end
	return true
}

// arrIter iterates the elements of a JSON array.
type arrIter struct {
	s   string
	i   int
	val string
}

func newArrIter(raw string) arrIter {
	i := skipWS(raw, 0)
	if i < len(raw) && raw[i] == '[' {
		return arrIter{s: raw, i: i + 1}
	}
	return arrIter{s: raw, i: len(raw)}
}

func (it *arrIter) next() bool {
	s := it.s
	i := skipSep(s, it.i)
	if i >= len(s) || s[i] == ']' {
		it.i = len(s)
		return false
	}
	end := valueEnd(s, i)
	if end == i {
		it.i = len(s)
		return false
	}
	it.val = s[i:end]
	it.i = end
	return true
}

func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

func skipSep(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == ',') {
		i++
	}
	return i
}

// stringEnd returns the index just after the string token opening at s[i].
func stringEnd(s string, i int) int {
	j := i + 1
	for j < len(s) {
		q := strings.IndexByte(s[j:], '"')
		if q < 0 {
			return len(s)
		}
		j += q
		// The quote is escaped when an odd run of backslashes precedes it.
		n := 0
		for k := j - 1; k > i && s[k] == '\\'; k-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j
		}
	}
	return len(s)
}

// valueEnd returns the index just after the value token starting at s[i].
func valueEnd(s string, i int) int {
	if i >= len(s) {
		return len(s)
	}
	switch s[i] {
	case '"':
		return stringEnd(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); {
			switch s[j] {
			case '"':
				j = stringEnd(s, j)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
			j++
		}
		return len(s)
	}
	j := i
	for j < len(s) {
		switch s[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// isObject reports whether raw is an object token.
func isObject(raw string) bool {
	i := skipWS(raw, 0)
	return i < len(raw) && raw[i] == '{'
}

// isString reports whether raw is a string token.
func isString(raw string) bool { return len(raw) >= 2 && raw[0] == '"' }

// appendString appends the decoded text of the string token raw to dst.
// Invalid escapes and lone surrogates become U+FFFD, as encoding/json does.
func appendString(dst []byte, raw string) []byte {
	if !isString(raw) {
		return dst
	}
	s := raw[1 : len(raw)-1]
	for {
		j := strings.IndexByte(s, '\\')
		if j < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:j]...)
		s = s[j:]
		if len(s) < 2 {
			return dst
		}
		c := s[1]
		s = s[2:]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s)
			if !ok {
				dst = utf8.AppendRune(dst, utf8.RuneError)
				continue
			}
			s = s[4:]
			if r >= 0xD800 && r < 0xDC00 {
				// A high surrogate must be followed by an escaped low one.
				if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					if lo, ok := hex4(s[2:]); ok && lo >= 0xDC00 && lo < 0xE000 {
						s = s[6:]
						dst = utf8.AppendRune(dst, (r-0xD800)<<10+(lo-0xDC00)+0x10000)
						continue
					}
				}
				r = utf8.RuneError
			} else if r >= 0xDC00 && r < 0xE000 {
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
}

func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// stringEqual reports whether the string token raw decodes to b, without
// allocating when raw holds no escapes.
func stringEqual(raw string, b []byte) bool {
	if !isString(raw) {
		return false
	}
	s := raw[1 : len(raw)-1]
	if strings.IndexByte(s, '\\') < 0 {
		return s == string(b)
	}
	var tmp [64]byte
	return string(appendString(tmp[:0], raw)) == string(b)
}

// parseInt parses a JSON number token as an int, truncating a fraction; a
// quoted integer is accepted too (some adapters send "index":"0"). ok is
// false for anything else.
func parseInt(raw string) (int, bool) {
	if isString(raw) {
		raw = raw[1 : len(raw)-1]
	}
	i, neg := 0, false
	if i < len(raw) && raw[i] == '-' {
		neg, i = true, 1
	}
	if i >= len(raw) || raw[i] < '0' || raw[i] > '9' {
		return 0, false
	}
	const limit = 1 << 40 // far beyond any index or token count; no overflow
	n := 0
	for ; i < len(raw) && raw[i] >= '0' && raw[i] <= '9'; i++ {
		n = min(n*10+int(raw[i]-'0'), limit)
	}
	if neg {
		n = -n
	}
	return n, true
}
