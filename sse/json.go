package sse

import (
	"strings"

	"github.com/loopguard/loopguard/internal/rawjson"
)

// The helpers below iterate JSON that rawjson.Valid has already accepted,
// on rawjson's walkers. They exist because every gjson accessor unescapes
// each string value it touches into a new string, and the strings of a chunk
// (content, tool arguments) are exactly the ones that carry escapes. Walking
// raw tokens and unescaping straight into the accumulator's buffers keeps Add
// allocation-free. They stay in bounds on any input, valid or not.

// objIter iterates the members of a JSON object.
type objIter struct {
	s        string
	i        int
	key, val string // key without quotes, not unescaped; val is the raw token
	doc      docEnds
	valAt    int // index of val in the document doc describes
}

// docEnds says where the containers of the document a walk is in end, so
// that a value is skipped without scanning it: ends is nil when unknown,
// off is the index in the document of the string walked.
type docEnds struct {
	ends *rawjson.Ends
	off  int
}

// valueEnd is rawjson.ValueEnd of s[i], s being the string at d.off.
func (d docEnds) valueEnd(s string, i int) int {
	if d.ends != nil && i < len(s) && (s[i] == '{' || s[i] == '[') {
		if end := d.ends.End(d.off+i) - d.off; end > i && end <= len(s) {
			return end
		}
	}
	return rawjson.ValueEnd(s, i)
}

func newObjIter(raw string) objIter { return newObjIterIn(raw, docEnds{}) }

// newObjIterIn iterates the object raw, which lies where doc says.
func newObjIterIn(raw string, doc docEnds) objIter {
	i := rawjson.SkipSpace(raw, 0)
	if i < len(raw) && raw[i] == '{' {
		return objIter{s: raw, i: i + 1, doc: doc}
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
	k := rawjson.StringEnd(s, i)
	it.key = s[i+1 : max(i+1, k-1)]
	i = rawjson.SkipSpace(s, k)
	if i < len(s) && s[i] == ':' {
		i++
	}
	i = rawjson.SkipSpace(s, i)
	end := it.doc.valueEnd(s, i)
	it.val, it.valAt = s[i:end], it.doc.off+i
	it.i = end
	return true
}

// valDoc is where it.val lies in the document.
func (it *objIter) valDoc() docEnds { return docEnds{it.doc.ends, it.valAt} }

// arrIter iterates the elements of a JSON array.
type arrIter struct {
	s     string
	i     int
	val   string
	doc   docEnds
	valAt int // index of val in the document doc describes
}

func newArrIter(raw string) arrIter { return newArrIterIn(raw, docEnds{}) }

// newArrIterIn iterates the array raw, which lies where doc says.
func newArrIterIn(raw string, doc docEnds) arrIter {
	i := rawjson.SkipSpace(raw, 0)
	if i < len(raw) && raw[i] == '[' {
		return arrIter{s: raw, i: i + 1, doc: doc}
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
	end := it.doc.valueEnd(s, i)
	if end == i {
		it.i = len(s)
		return false
	}
	it.val, it.valAt = s[i:end], it.doc.off+i
	it.i = end
	return true
}

// valDoc is where it.val lies in the document.
func (it *arrIter) valDoc() docEnds { return docEnds{it.doc.ends, it.valAt} }

func skipSep(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == ',') {
		i++
	}
	return i
}

// isObject reports whether raw is an object token.
func isObject(raw string) bool {
	i := rawjson.SkipSpace(raw, 0)
	return i < len(raw) && raw[i] == '{'
}

// isString reports whether raw is a string token.
func isString(raw string) bool { return len(raw) >= 2 && raw[0] == '"' }

// appendString appends the decoded text of the string token raw to dst.
// Lone surrogates become U+FFFD, as encoding/json does.
func appendString(dst []byte, raw string) []byte {
	if !isString(raw) {
		return dst
	}
	return rawjson.AppendUnescaped(dst, raw[1:len(raw)-1])
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
