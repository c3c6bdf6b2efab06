package rawjson

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// The walkers below take JSON that Valid has accepted, as a string that
// aliases the body (no copy): they find where tokens end and decode strings
// when asked, and never allocate.

// SkipSpace returns the index of the first non-space byte at or after i.
// Compact JSON has no blanks: the first comparison ends most calls.
func SkipSpace(s string, i int) int {
	for i < len(s) && s[i] <= ' ' && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
		i++
	}
	return i
}

// ValueEnd returns the index just past the JSON value starting at i.
func ValueEnd(s string, i int) int {
	if i >= len(s) {
		return len(s)
	}
	switch s[i] {
	case '"':
		return StringEnd(s, i)
	case '{', '[':
		return CloseEnd(s, i, 0)
	default:
		for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t' {
			i++
		}
		return i
	}
}

// Members calls fn with the key and the raw value of each member of the
// object s holds, in order, until fn returns false: one pass over the top
// level that skips each value with the walkers (IndexByte from quote to
// quote), several times faster than gjson's ForEach on a long history. A key
// with escapes is decoded first (allocating); the rest alias s.
//
// s need not have passed Valid, as a request body that is not inspected
// has not: Members never reads past s, and it stops at the first byte that
// does not fit an object's members, having called fn for those before.
func Members(s string, fn func(key, value string) bool) {
	MembersWith(s, func(key string, at int) int {
		end := ValueEnd(s, at)
		if end <= at || !fn(key, s[at:end]) {
			return -1
		}
		return end
	})
}

// MembersWith walks the object s holds as Members does, but leaves each
// value to member: it gets the key and the index where the value starts,
// and returns the index just past the value, or -1 to stop. A caller can so
// stop before a long value (a request's history) without scanning it, and
// resume past it with MembersAfter once it knows where it ends.
func MembersWith(s string, member func(key string, at int) int) {
	i := SkipSpace(s, 0)
	if i >= len(s) || s[i] != '{' {
		return
	}
	walkMembers(s, i+1, member)
}

// MembersAfter is MembersWith from i on, the index just past the value of
// one of the object's members.
func MembersAfter(s string, i int, member func(key string, at int) int) {
	if i = SkipSpace(s, i); i < len(s) && s[i] == ',' {
		walkMembers(s, i+1, member)
	}
}

// walkMembers walks an object's members from s[i], where a member (or the
// object's end) is due.
func walkMembers(s string, i int, member func(key string, at int) int) {
	for {
		i = SkipSpace(s, i)
		if i >= len(s) || s[i] != '"' {
			return // the object's end, or not an object
		}
		end := StringEnd(s, i)
		key := s[i+1 : max(end-1, i+1)]
		if strings.IndexByte(key, '\\') >= 0 {
			key = string(AppendUnescaped(nil, key))
		}
		if i = SkipSpace(s, end); i >= len(s) || s[i] != ':' {
			return
		}
		at := SkipSpace(s, i+1)
		if i = member(key, at); i < 0 {
			return
		}
		if i = SkipSpace(s, i); i >= len(s) || s[i] != ',' {
			return
		}
		i++
	}
}

// CloseEnd returns the index just past the bracket that closes the
// container s[i] is in, depth containers deep (0 when s[i] opens it):
// ValueEnd of an object or array, or the end of an array walked partway.
func CloseEnd(s string, i, depth int) int {
	for i < len(s) {
		switch s[i] {
		case '"':
			i = StringEnd(s, i)
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return len(s)
}

// StringEnd returns the index just past the string starting at i (a quote).
// Keys, roles and ids end within a few words: those are searched eight
// bytes at a time in a register for a quote or a backslash. Past that it
// jumps from quote to quote with IndexByte (vectorised) and counts the
// backslashes before each: tool results are long strings.
func StringEnd(s string, i int) int {
	j := i + 1
	for lim := min(len(s)-8, i+32); j <= lim; {
		m := quoteOrBackslash(binary.LittleEndian.Uint64(Bytes(s[j : j+8])))
		if m == 0 {
			j += 8
			continue
		}
		j += bits.TrailingZeros64(m) >> 3
		if s[j] == '"' {
			return j + 1
		}
		j += 2 // the escaped byte cannot end the string
	}
	for j < len(s) {
		q := strings.IndexByte(s[j:], '"')
		if q < 0 {
			return len(s)
		}
		j += q
		bs := 0
		for k := j - 1; k > i && s[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return j + 1
		}
		j++
	}
	return len(s)
}

// quoteOrBackslash flags, in the high bit of each byte, the bytes of v that
// are a quote or a backslash; as in specialBytes, only the lowest flag is
// sure to be right.
func quoteOrBackslash(v uint64) uint64 {
	q := v ^ (lsb * '"')
	b := v ^ (lsb * '\\')
	return ((q-lsb)&^q | (b-lsb)&^b) & msb
}

// AppendUnescaped decodes the body of a JSON string (without quotes).
// Bad escapes are kept as they are: a malformed argument string must not
// fail the whole request, the body was validated already anyway.
func AppendUnescaped(dst []byte, s string) []byte {
	i := indexBackslash(s)
	if i < 0 {
		return append(dst, s...)
	}
	return appendUnescaped(dst, s, i)
}

// appendUnescaped is AppendUnescaped for s with a backslash at i. Most
// strings have none: they are appended from AppendUnescaped's small frame,
// not from this one's, on the stack of a relay that reads every delta of
// its stream (docs/streams.md).
func appendUnescaped(dst []byte, s string, i int) []byte {
	for ; i >= 0; i = indexBackslash(s) {
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) < 2 {
			return append(dst, s...)
		}
		switch c := s[1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'n':
			dst = append(dst, '\n')
		case 't':
			dst = append(dst, '\t')
		case 'r':
			dst = append(dst, '\r')
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'u':
			r, n := decodeU(s)
			if n == 0 {
				dst = append(dst, s[:2]...)
				s = s[2:]
				continue
			}
			dst = utf8.AppendRune(dst, r)
			s = s[n:]
			continue
		default:
			dst = append(dst, s[:2]...)
		}
		s = s[2:]
	}
	return append(dst, s...)
}

// indexBackslash is strings.IndexByte(s, '\\') tuned for text with an
// escape every few dozen bytes (tool output is full of \n): the first 64
// bytes are searched eight at a time in a register, and only a longer
// run without escapes goes to the vectorised IndexByte, whose call costs
// more than a short search. The last bytes of a shorter text are looked at
// one by one: a stream's delta is a few words, and calling IndexByte for
// them, or for none, was an eighth of the chat accumulator's time with
// thousands of open streams (its code is out of the cache by the next
// event, docs/streams.md).
func indexBackslash(s string) int {
	const bs = lsb * '\\'
	i := 0
	for lim := min(len(s), 64) - 8; i <= lim; i += 8 {
		v := binary.LittleEndian.Uint64(Bytes(s[i : i+8]))
		x := v ^ bs
		if m := (x - lsb) &^ x & msb; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	if len(s) <= 64 {
		for ; i < len(s); i++ {
			if s[i] == '\\' {
				return i
			}
		}
		return -1
	}
	if j := strings.IndexByte(s[i:], '\\'); j >= 0 {
		return i + j
	}
	return -1
}

// decodeU decodes \uXXXX (with a following low surrogate when needed) and
// returns the rune and the bytes consumed, 0 if s does not start with one.
func decodeU(s string) (rune, int) {
	hex4 := func(s string) (rune, bool) {
		if len(s) < 4 {
			return 0, false
		}
		var r rune
		for i := 0; i < 4; i++ {
			c := s[i]
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	r, ok := hex4(s[2:])
	if !ok {
		return 0, 0
	}
	if r >= 0xD800 && r < 0xDC00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
		if lo, ok := hex4(s[8:]); ok && lo >= 0xDC00 && lo < 0xE000 {
			return (r-0xD800)<<10 | (lo - 0xDC00) + 0x10000, 12
		}
	}
	if r >= 0xD800 && r < 0xE000 {
		return utf8.RuneError, 6
	}
	return r, 6
}

// Bytes returns s's bytes without copying; they must not be modified.
func Bytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// View returns b as a string without copying, for gjson.Parse on a body:
// gjson.ParseBytes copies the whole body first. Results alias b: copy any
// string kept beyond b's lifetime, and do not change b while they are in use.
func View(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
