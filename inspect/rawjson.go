package inspect

// A minimal walker over JSON already validated by validJSON. gjson's
// ForEach and Get unescape every string value they pass (an allocation per
// tool result); the walker only finds boundaries, and strings are unescaped
// once, into the trajectory's arena, when they are wanted.

import "strings"

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
		i++
	}
	return i
}

// valueEnd returns the index just past the JSON value starting at i.
func valueEnd(s string, i int) int {
	if i >= len(s) {
		return len(s)
	}
	switch s[i] {
	case '"':
		return stringEnd(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = stringEnd(s, i)
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
	default:
		for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t' {
			i++
		}
		return i
	}
}

// stringEnd returns the index just past the string starting at i (a quote).
// It jumps from quote to quote with IndexByte (vectorised) and counts the
// backslashes before each: tool results are long strings.
func stringEnd(s string, i int) int {
	// Keys, roles and ids end within a few bytes, before a call to
	// IndexByte pays off.
	j := i + 1
	for lim := min(len(s), i+24); j < lim; j++ {
		switch s[j] {
		case '"':
			return j + 1
		case '\\':
			j++ // the escaped byte cannot end the string
		}
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

// eachMember calls fn with the raw key (quoted) and raw value of every
// member of the object obj, until fn returns false.
func eachMember(obj string, fn func(key, val string) bool) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	membersAt(obj, i, fn)
}

// membersAt is eachMember for the object starting at s[i] (a '{') inside
// a larger text; it returns the index just past the object (len(s) if fn
// stopped early). A walker of an array of large objects learns each
// element's end this way instead of scanning every element twice.
func membersAt(s string, i int, fn func(key, val string) bool) int {
	i++
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			return len(s)
		}
		if s[i] == '}' {
			return i + 1
		}
		if s[i] == ',' {
			i++
			continue
		}
		ke := stringEnd(s, i)
		key := s[i:ke]
		i = skipSpace(s, ke)
		if i < len(s) && s[i] == ':' {
			i++
		}
		i = skipSpace(s, i)
		ve := valueEnd(s, i)
		if !fn(key, s[i:ve]) {
			return len(s)
		}
		i = ve
	}
}

// eachElement calls fn with the raw text of every element of the array arr.
func eachElement(arr string, fn func(val string) bool) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i++
	for {
		i = skipSpace(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return
		}
		if arr[i] == ',' {
			i++
			continue
		}
		ve := valueEnd(arr, i)
		if !fn(arr[i:ve]) {
			return
		}
		i = ve
	}
}

// rawKind is the first byte of a raw value: '"', '{', '[', 'n', 't', 'f'
// or a digit/minus; 0 for an absent value.
func rawKind(v string) byte {
	if v == "" {
		return 0
	}
	return v[0]
}

// rawKeyIs compares a raw quoted key with a plain name. Keys with escapes
// never match: no field loopguard reads is spelt with one.
func rawKeyIs(raw, name string) bool {
	return len(raw) == len(name)+2 && raw[1:len(raw)-1] == name
}

// rawStr returns the unescaped value of a raw string in the arena, or ""
// for any other kind.
func (a *arena) rawStr(v string) string {
	if rawKind(v) != '"' || len(v) < 2 {
		return ""
	}
	body := v[1 : len(v)-1]
	a.reserve(len(body))
	m := a.mark()
	a.buf = appendUnescaped(a.buf, body)
	return a.since(m)
}
