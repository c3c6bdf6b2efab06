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
	// taped: the members are read from the tape nextIn is given, the next
	// being entry k, the object's last before stop; val is entry valK.
	taped         bool
	k, stop, valK int
}

// taped is a document and its tape (rawjson.ValidTape). It lives on the
// stack of the walk, where it is in the cache: every open stream holding
// its own (docs/streams.md) made each event miss on it. So the iterators do not
// hold it (the compiler would move it to the heap); their nextIn and
// valAt are given it.
type taped struct {
	doc  string
	tape rawjson.Tape
}

// tapeAt is entry k of the tape of a walk; without one (tp nil, or an
// empty tape) iterators scan.
type tapeAt struct {
	tp *taped
	k  int
}

// opens reports whether there is a tape, and entry k of it opens with c.
func (t tapeAt) opens(c byte) bool {
	if t.tp == nil {
		return false
	}
	vals := t.tp.tape.Values()
	return t.k < len(vals) && t.tp.doc[vals[t.k].Start] == c
}

func newObjIter(raw string) objIter { return newObjIterAt(raw, tapeAt{}) }

// newObjIterAt iterates the object raw, the value at of a tape when there
// is one.
func newObjIterAt(raw string, at tapeAt) (it objIter) {
	it.start(raw, at)
	return it
}

// start readies it as newObjIterAt does, in place. A walk that reads
// deltas under its iterators (ChatAccumulator's) starts them so: the
// iterator that newObjIterAt returns, too large for registers, takes a
// second place in the caller's frame (docs/streams.md: the relay's
// goroutine stack).
func (it *objIter) start(raw string, at tapeAt) {
	if at.opens('{') {
		*it = objIter{taped: true, k: at.k + 1, stop: int(at.tp.tape.Values()[at.k].After)}
		return
	}
	i := rawjson.SkipSpace(raw, 0)
	if i < len(raw) && raw[i] == '{' {
		*it = objIter{s: raw, i: i + 1}
		return
	}
	*it = objIter{s: raw, i: len(raw)}
}

func (it *objIter) next() bool { return it.nextIn(nil) }

// nextIn is next, on the tape tp that it was made on, if it was.
func (it *objIter) nextIn(tp *taped) bool {
	if it.taped {
		if it.k >= it.stop {
			return false
		}
		v := tp.tape.Values()[it.k]
		it.key, it.val = tp.doc[v.Key+1:int(v.Key)+int(v.KeyLen)-1], tp.doc[v.Start:v.End]
		it.valK, it.k = it.k, int(v.After)
		return true
	}
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
	end := rawjson.ValueEnd(s, i)
	it.val = s[i:end]
	it.i = end
	return true
}

// valAt is where on the tape tp it.val is; no tape when the walk scans.
func (it *objIter) valAt(tp *taped) tapeAt {
	if !it.taped {
		return tapeAt{}
	}
	return tapeAt{tp, it.valK}
}

// arrIter iterates the elements of a JSON array.
type arrIter struct {
	s   string
	i   int
	val string
	// As in objIter.
	taped         bool
	k, stop, valK int
}

func newArrIter(raw string) arrIter { return newArrIterAt(raw, tapeAt{}) }

// newArrIterAt iterates the array raw, the value at of a tape when there
// is one.
func newArrIterAt(raw string, at tapeAt) (it arrIter) {
	it.start(raw, at)
	return it
}

// start readies it as newArrIterAt does, in place (see objIter.start).
func (it *arrIter) start(raw string, at tapeAt) {
	if at.opens('[') {
		*it = arrIter{taped: true, k: at.k + 1, stop: int(at.tp.tape.Values()[at.k].After)}
		return
	}
	i := rawjson.SkipSpace(raw, 0)
	if i < len(raw) && raw[i] == '[' {
		*it = arrIter{s: raw, i: i + 1}
		return
	}
	*it = arrIter{s: raw, i: len(raw)}
}

func (it *arrIter) next() bool { return it.nextIn(nil) }

// nextIn is next, on the tape tp that it was made on, if it was.
func (it *arrIter) nextIn(tp *taped) bool {
	if it.taped {
		if it.k >= it.stop {
			return false
		}
		v := tp.tape.Values()[it.k]
		it.val = tp.doc[v.Start:v.End]
		it.valK, it.k = it.k, int(v.After)
		return true
	}
	s := it.s
	i := skipSep(s, it.i)
	if i >= len(s) || s[i] == ']' {
		it.i = len(s)
		return false
	}
	end := rawjson.ValueEnd(s, i)
	if end == i {
		it.i = len(s)
		return false
	}
	it.val = s[i:end]
	it.i = end
	return true
}

// valAt is where on the tape tp it.val is; no tape when the walk scans.
func (it *arrIter) valAt(tp *taped) tapeAt {
	if !it.taped {
		return tapeAt{}
	}
	return tapeAt{tp, it.valK}
}

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
