package fakellm

import (
	"strconv"
	"unicode/utf8"
)

// appendString appends s as a JSON string. Unlike encoding/json it does not
// escape <, > and &: Python's json.dumps and nlohmann::json (the serializers
// of vLLM and llama.cpp) leave them alone, and golden bytes must match theirs.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			// Invalid UTF-8 would make the body invalid JSON; every real
			// server replaces it, so do the same.
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendInt appends n in decimal.
func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// splitText cuts s into pieces of at most size bytes without splitting a
// UTF-8 sequence (a real tokenizer never emits half a rune in a delta).
func splitText(s string, size int) []string {
	if s == "" {
		return nil
	}
	if size <= 0 {
		size = DefaultChunkSize
	}
	var out []string
	for len(s) > 0 {
		n := size
		if n >= len(s) {
			out = append(out, s)
			break
		}
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		if n == 0 {
			// One rune longer than size: emit it whole.
			_, n = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
