package inspect

// Iteration over objects and arrays of a body rawjson.Valid accepted, on
// top of rawjson's walkers: strings are unescaped once, into the
// trajectory's arena, when they are wanted.

import "github.com/loopguard/loopguard/internal/rawjson"

// eachMember calls fn with the raw key (quoted) and raw value of every
// member of the object obj, until fn returns false.
func eachMember(obj string, fn func(key, val string) bool) {
	i := rawjson.SkipSpace(obj, 0)
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
	return membersWith(s, i, func(key string, at int) int {
		ve := rawjson.ValueEnd(s, at)
		if !fn(key, s[at:ve]) {
			return len(s)
		}
		return ve
	})
}

// membersWith walks the object starting at s[i] (a '{') as membersAt does,
// but leaves each value to member: it gets the raw key and the value's
// index, and returns the index just past the value (len(s) to stop).
func membersWith(s string, i int, member func(key string, at int) int) int {
	i++
	for {
		i = rawjson.SkipSpace(s, i)
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
		ke := rawjson.StringEnd(s, i)
		key := s[i:ke]
		i = rawjson.SkipSpace(s, ke)
		if i < len(s) && s[i] == ':' {
			i++
		}
		i = member(key, rawjson.SkipSpace(s, i))
	}
}

// eachElement calls fn with the raw text of every element of the array arr.
func eachElement(arr string, fn func(val string) bool) {
	i := rawjson.SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	elementsFrom(arr, i+1, fn)
}

// elementsFrom is eachElement from arr[i] on, a position between elements
// of the array arr.
func elementsFrom(arr string, i int, fn func(val string) bool) {
	for {
		i = rawjson.SkipSpace(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return
		}
		if arr[i] == ',' {
			i++
			continue
		}
		ve := rawjson.ValueEnd(arr, i)
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
	a.buf = rawjson.AppendUnescaped(a.buf, body)
	return a.since(m)
}

// memberRaw returns the raw value of obj's first member named name, "" if
// there is none.
func memberRaw(obj, name string) string {
	var out string
	eachMember(obj, func(k, v string) bool {
		if rawKeyIs(k, name) {
			out = v
			return false
		}
		return true
	})
	return out
}
