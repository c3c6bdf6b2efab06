// Package rawjson validates untrusted JSON and walks validated JSON in
// place, for the packages that read request bodies and stream events without
// unmarshalling them (inspect, sse, inject, proxy).
//
// Valid replaces gjson.Valid on untrusted bytes: gjson recurses once per
// nesting level, so a body of a few megabytes of '[' exhausts the goroutine
// stack, a fatal error that recover cannot catch, which would let one
// request crash the proxy. The walkers (SkipSpace, StringEnd, ValueEnd,
// AppendUnescaped) only find boundaries and decode strings on demand:
// gjson's Get and ForEach unescape every string they pass, an allocation per
// tool result.
package rawjson

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// Valid reports whether data is one JSON value with optional
// surrounding whitespace. It accepts exactly what gjson.ValidBytes accepts
// (RFC 8259; string bytes are not checked for UTF-8), which a differential
// fuzz test holds it to, but it is faster and safer on request bodies:
//
//   - strings, most of a chat history's bytes, are scanned eight bytes at a
//     time for the only bytes that matter in them (quote, backslash,
//     control characters) instead of one byte per loop iteration;
//   - nesting is tracked on an explicit stack, not by recursion, so a body
//     of a million '[' cannot exhaust the goroutine stack (a fatal error
//     that recover cannot catch).
func Valid(data []byte) bool { return valid(data, nil) }

// Tape is the structure of a small document as ValidTape found it: its
// values in document order, each with where it lies and, for a member of
// an object, where its key lies. A walker reads a stream's chunk from it
// without scanning: after Valid, walking a chat chunk with ValueEnd
// scanned it again at every level it descended through, the text of its
// delta four times over (docs/streams.md). A tape is small, as every open stream
// holds one; a document of 64 KiB or more, or of more than tapeMax values,
// gets an empty tape, and its walker scans.
type Tape struct {
	n    uint8
	vals [tapeMax]TapeValue
}

// TapeValue is one value of a Tape: the value is doc[Start:End]; in an
// object its key, quotes included, is doc[Key:Key+KeyLen] (both 0 for an
// element of an array and for the document). Its members or elements are
// the values from the next one up to After, skipping from each to its own
// After.
type TapeValue struct {
	Start, End, Key uint16
	KeyLen, After   uint8
}

// tapeMax is how many values a Tape holds: a chat chunk has about 14 (the
// chunk, its id, object, created, model and choices, a choice and its
// index, delta, logprobs and finish_reason, the delta's content), a tool
// call 8 more.
const tapeMax = 32

// Values returns the tape's values, the document's first; none when the
// tape is empty.
func (t *Tape) Values() []TapeValue { return t.vals[:t.n] }

// ValidTape is Valid, and records the document's structure in t when it is
// valid, small and of at most tapeMax values; t is empty otherwise.
func ValidTape(data []byte, t *Tape) bool {
	t.n = 0
	if len(data) > math.MaxUint16 {
		return valid(data, nil)
	}
	r := tapeRecorder{t: t}
	ok := valid(data, &r)
	if !ok || r.full {
		t.n = 0
	}
	return ok
}

// valid is Valid, recording the document's structure in r unless it is
// nil.
func valid(data []byte, r *tapeRecorder) bool {
	var stk [32]byte
	stack := stk[:0] // the closing byte of each open container
	i := 0
	ok := false
	for {
		// A value starts at i (after optional whitespace).
		i = skipSpaceBytes(data, i)
		if i >= len(data) {
			return false
		}
		cur := 0
		if r != nil {
			cur = r.value(i)
		}
		switch c := data[i]; c {
		case '{':
			i = skipSpaceBytes(data, i+1)
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			stack = append(stack, '}')
			if r != nil {
				r.push(cur)
			}
			if i, ok = validKey(data, i, r); !ok {
				return false
			}
			continue
		case '[':
			i = skipSpaceBytes(data, i+1)
			if i < len(data) && data[i] == ']' {
				i++
				break
			}
			stack = append(stack, ']')
			if r != nil {
				r.push(cur)
			}
			continue
		case '"':
			if i, ok = validString(data, i+1); !ok {
				return false
			}
		case 't':
			if !hasWord(data, i, "true") {
				return false
			}
			i += 4
		case 'f':
			if !hasWord(data, i, "false") {
				return false
			}
			i += 5
		case 'n':
			if !hasWord(data, i, "null") {
				return false
			}
			i += 4
		default:
			if i, ok = validNumber(data, i); !ok {
				return false
			}
		}
		if r != nil {
			r.end(cur, i)
		}
		// A value ended at i: close containers until the next member or
		// element begins, or the document ends.
		for {
			i = skipSpaceBytes(data, i)
			if len(stack) == 0 {
				return i == len(data)
			}
			if i >= len(data) {
				return false
			}
			top := stack[len(stack)-1]
			if data[i] == top {
				stack = stack[:len(stack)-1]
				i++
				if r != nil {
					r.end(r.pop(), i)
				}
				continue
			}
			if data[i] != ',' {
				return false
			}
			i++
			if top == '}' {
				if i, ok = validKey(data, skipSpaceBytes(data, i), r); !ok {
					return false
				}
			}
			break
		}
	}
}

// tapeRecorder records a Tape as valid walks the document.
type tapeRecorder struct {
	t    *Tape
	n    int  // values seen, recorded or not
	full bool // more than tapeMax values, or too deep: the tape is left empty
	// key and keyEnd are where the key of the next value lies, 0 when it
	// is an element.
	key, keyEnd int
	// open holds the entries of the containers the walk is in, deep of
	// them (small: the relay's goroutine keeps an 8 KiB stack).
	open [32]uint8
	deep int
}

// value records a value that starts at i and returns its entry.
func (r *tapeRecorder) value(i int) int {
	k := r.n
	r.n++
	if k >= tapeMax {
		r.full = true
		return k
	}
	if r.keyEnd-r.key > math.MaxUint8 {
		r.full = true // a key no chunk has
		return k
	}
	r.t.vals[k] = TapeValue{Start: uint16(i), Key: uint16(r.key), KeyLen: uint8(r.keyEnd - r.key)}
	r.key, r.keyEnd = 0, 0
	r.t.n = uint8(k + 1)
	return k
}

// end records that the value of entry k ends at i.
func (r *tapeRecorder) end(k, i int) {
	if k < tapeMax {
		r.t.vals[k].End, r.t.vals[k].After = uint16(i), uint8(min(r.n, tapeMax))
	}
}

// push notes that the walk entered the container of entry k.
func (r *tapeRecorder) push(k int) {
	if r.deep < len(r.open) && k < tapeMax {
		r.open[r.deep] = uint8(k)
	} else {
		r.full = true
	}
	r.deep++
}

// pop notes that the walk left the innermost container and returns its
// entry.
func (r *tapeRecorder) pop() int {
	r.deep--
	if r.deep < len(r.open) {
		return int(r.open[r.deep])
	}
	return tapeMax
}

// skipSpaceBytes is SkipSpace on bytes. Compact JSON has no blanks: the
// first comparison ends most calls.
func skipSpaceBytes(data []byte, i int) int {
	for i < len(data) && data[i] <= ' ' && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t') {
		i++
	}
	return i
}

func hasWord(data []byte, i int, w string) bool {
	return len(data)-i >= len(w) && string(data[i:i+len(w)]) == w
}

// validKey checks `"key" :` at i and returns the index after the colon;
// it tells r, unless nil, where the key lies.
func validKey(data []byte, i int, r *tapeRecorder) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false
	}
	key := i
	i, ok := validString(data, i+1)
	if !ok {
		return i, false
	}
	if r != nil {
		r.key, r.keyEnd = key, i
	}
	i = skipSpaceBytes(data, i)
	if i >= len(data) || data[i] != ':' {
		return i, false
	}
	return i + 1, true
}

// SWAR constants: one in every byte, and the high bit of every byte.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// specialBytes flags, in the high bit of each byte, the bytes of v that
// are a quote, a backslash or below 0x20. The flags above the lowest one
// may be false (a borrow runs upward), the lowest one never is.
func specialBytes(v uint64) uint64 {
	q := v ^ (lsb * '"')
	b := v ^ (lsb * '\\')
	return ((q-lsb)&^q | (b-lsb)&^b | (v-lsb*0x20)&^v) & msb
}

// validString checks a string body starting at i (after the opening
// quote) and returns the index after the closing quote.
func validString(data []byte, i int) (int, bool) {
	for i < len(data) {
		if len(data)-i >= 8 {
			m := specialBytes(binary.LittleEndian.Uint64(data[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		}
		switch c := data[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(data) {
				return i + 1, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(data)-i < 6 || !isHex(data[i+2]) || !isHex(data[i+3]) || !isHex(data[i+4]) || !isHex(data[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			i++
		}
	}
	return i, false
}

// validNumber checks a JSON number at i: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	if i >= len(data) || !isDigit(data[i]) {
		return i, false
	}
	if data[i] == '0' {
		i++
	} else {
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return i, false
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return i, false
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	return i, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
