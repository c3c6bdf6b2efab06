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

// Ends remembers where the first containers of a small document end, in
// the order they open (ValidEnds). A walker that reads a few members of a
// stream's chunk would otherwise scan each container it descends into, or
// skips, once for every level above it: the text of a chat chunk's delta
// was scanned three times over after Valid (issue 18). It is small, as
// every open stream holds one: containers of a document of 64 KiB or more
// are not remembered.
type Ends struct {
	n          uint8
	start, end [endsMax]uint16
}

// endsMax is how many containers Ends remembers: a chat chunk has four
// (the chunk, choices, a choice, its delta), a tool call three more.
const endsMax = 8

// End returns the index just past the container that starts at index i of
// the document, or -1 when e does not know it (not a container, past the
// first endsMax, or the document is too long).
func (e *Ends) End(i int) int {
	for k := 0; k < int(e.n) && int(e.start[k]) <= i; k++ {
		if int(e.start[k]) == i {
			return int(e.end[k])
		}
	}
	return -1
}

// ValidEnds is Valid, and records in e where the document's first
// containers end when it is valid.
func ValidEnds(data []byte, e *Ends) bool {
	e.n = 0
	if len(data) > math.MaxUint16 {
		return valid(data, nil)
	}
	if !valid(data, e) {
		e.n = 0
		return false
	}
	return true
}

// valid is Valid, recording container ends in e unless it is nil.
func valid(data []byte, e *Ends) bool {
	var stk [32]byte
	stack := stk[:0] // the closing byte of each open container
	// slots[k] is the entry of e the k-th open container has, -1 if none.
	var slotStk [32]int8
	slots := slotStk[:0]
	i := 0
	ok := false
	for {
		// A value starts at i (after optional whitespace).
		i = skipSpaceBytes(data, i)
		if i >= len(data) {
			return false
		}
		switch c := data[i]; c {
		case '{':
			at := i
			i = skipSpaceBytes(data, i+1)
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			stack = append(stack, '}')
			if e != nil {
				slots = e.open(slots, at)
			}
			if i, ok = validKey(data, i); !ok {
				return false
			}
			continue
		case '[':
			at := i
			i = skipSpaceBytes(data, i+1)
			if i < len(data) && data[i] == ']' {
				i++
				break
			}
			stack = append(stack, ']')
			if e != nil {
				slots = e.open(slots, at)
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
				if e != nil {
					if k := slots[len(slots)-1]; k >= 0 {
						e.end[k] = uint16(i)
					}
					slots = slots[:len(slots)-1]
				}
				continue
			}
			if data[i] != ',' {
				return false
			}
			i++
			if top == '}' {
				if i, ok = validKey(data, skipSpaceBytes(data, i)); !ok {
					return false
				}
			}
			break
		}
	}
}

// open records a container that opens at index at and pushes its entry on
// slots.
func (e *Ends) open(slots []int8, at int) []int8 {
	if e.n == endsMax {
		return append(slots, -1)
	}
	e.start[e.n] = uint16(at)
	e.n++
	return append(slots, int8(e.n)-1)
}

func skipSpaceBytes(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t') {
		i++
	}
	return i
}

func hasWord(data []byte, i int, w string) bool {
	return len(data)-i >= len(w) && string(data[i:i+len(w)]) == w
}

// validKey checks `"key" :` at i and returns the index after the colon.
func validKey(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false
	}
	i, ok := validString(data, i+1)
	if !ok {
		return i, false
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
