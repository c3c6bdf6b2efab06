package inject

import (
	"bytes"

	"github.com/loopguard/loopguard/internal/rawjson"
)

// A tiny JSON skipper that finds request.messages and its elements' bounds.
//
// gjson walks strings byte by byte; a long agent history is almost all
// string (tool output), so finding the last message of a long body costs
// gjson many times what copying it costs. Skipping strings with
// bytes.IndexByte (memchr) is several times faster, and the scan stops at
// the end of the messages array. The skipper only finds bounds: the few
// messages that placement reads are then read with gjson.

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false
		}
		p := j + k
		// The quote is escaped when an odd run of backslashes precedes it.
		n := 0
		for p-1-n > i && b[p-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return p + 1, true
		}
		j = p + 1
	}
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				var ok bool
				if i, ok = skipString(b, i); !ok {
					return 0, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\r' && b[j] != '\t' {
		j++
	}
	return j, j > i
}

// span is a value's bounds in the body: b[start:end].
type span struct{ start, end int }

// findMessages locates the first top-level "messages" array of a request
// body and the bounds of its elements. ok is false when the body is not an
// object or has no messages array. elems is appended to dst.
func findMessages(b []byte, dst []span) (arr span, elems []span, found, ok bool) {
	i := rawjson.SkipSpace(rawjson.View(b), 0)
	if i >= len(b) || b[i] != '{' {
		return span{}, dst, false, false
	}
	i++
	for {
		i = rawjson.SkipSpace(rawjson.View(b), i)
		if i >= len(b) || b[i] != '"' {
			return span{}, dst, false, false
		}
		ks := i
		ke, ok := skipString(b, i)
		if !ok {
			return span{}, dst, false, false
		}
		i = rawjson.SkipSpace(rawjson.View(b), ke)
		if i >= len(b) || b[i] != ':' {
			return span{}, dst, false, false
		}
		i = rawjson.SkipSpace(rawjson.View(b), i+1)
		if string(b[ks:ke]) == `"messages"` {
			if i >= len(b) || b[i] != '[' {
				return span{}, dst, false, true
			}
			return elements(b, i, dst)
		}
		if i, ok = skipValue(b, i); !ok {
			return span{}, dst, false, false
		}
		i = rawjson.SkipSpace(rawjson.View(b), i)
		if i >= len(b) || b[i] != ',' {
			return span{}, dst, false, i < len(b) && b[i] == '}'
		}
		i++
	}
}

// elements lists the elements of the array starting at b[i] == '['.
func elements(b []byte, i int, dst []span) (span, []span, bool, bool) {
	start := i
	i = rawjson.SkipSpace(rawjson.View(b), i+1)
	if i < len(b) && b[i] == ']' {
		return span{start, i + 1}, dst, true, true
	}
	for {
		e, ok := skipValue(b, i)
		if !ok {
			return span{}, dst, false, false
		}
		dst = append(dst, span{i, e})
		i = rawjson.SkipSpace(rawjson.View(b), e)
		if i >= len(b) {
			return span{}, dst, false, false
		}
		switch b[i] {
		case ']':
			return span{start, i + 1}, dst, true, true
		case ',':
			i = rawjson.SkipSpace(rawjson.View(b), i+1)
		default:
			return span{}, dst, false, false
		}
	}
}
