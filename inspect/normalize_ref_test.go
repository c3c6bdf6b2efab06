package inspect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// appendNormalizedRef is the byte-at-a-time normaliser appendNormalized
// replaced; the fuzz target below holds the fast one to it.
func appendNormalizedRef(dst []byte, s string) []byte {
	lineStart := len(dst)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == 0x1b: // ANSI escape: ESC [ params final-byte
			j := i + 1
			if j < len(s) && s[j] == '[' {
				j++
				for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
					j++
				}
				j++
			}
			i = min(j, len(s))
			continue
		case c == '\r':
			if i+1 < len(s) && s[i+1] != '\n' {
				dst = dst[:lineStart]
			}
			i++
			continue
		case c == '\n':
			dst = trimTrailingBlank(dst)
			dst = append(dst, '\n')
			lineStart = len(dst)
			i++
			continue
		case c == ':' || c == '=':
			if vs, ve := labelledValue(s, i); ve > 0 {
				dst = append(dst, s[i:vs]...)
				dst = append(dst, "<v>"...)
				i = ve
				continue
			}
		case c == '/' && (i == 0 || !isWordByte(s[i-1])):
			if n := tempPathLenRef(s[i:]); n > 0 {
				dst = append(dst, "<tmp>"...)
				i += n
				continue
			}
		case isWordByte(c) && (i == 0 || !isWordByte(s[i-1])):
			j := i
			hexOnly := true
			for j < len(s) && isWordByte(s[j]) {
				hexOnly = hexOnly && isHex(s[j])
				j++
			}
			// Only words that start with a digit, are all hex digits, or
			// spell "pid" can be volatile: skip the rules for the rest,
			// which is almost all text.
			if isDigit(c) || hexOnly && j-i >= 7 || j-i == 3 && (c == 'p' || c == 'P') {
				if repl, n := volatileToken(s, i); n > 0 {
					dst = append(dst, repl...)
					i += n
					continue
				}
			}
			// Copy the whole word so no rule fires inside it.
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		dst = append(dst, c)
		i++
	}
	return trimTrailingBlank(dst)
}

var normalizeCases = []string{
	"", "plain words only", "trailing blanks   \nnext\t \r\nline  ",
	"\x1b[31mred\x1b[0m text \x1b", "\x1b[0m2024-01-31 12:00:00.123Z boot", "at 2024-01-31T12:00:00+02:00 and 12:34",
	"id 3f2a1b4c5d and deadbeef and 12345678 and 1234567890123", "uuid 123e4567-e89b-12d3-a456-426614174000.",
	"addr 0x7ffd1234abcd pid 4242 PID: 17 pid=9 pidx 3", "took 0.53s and 12ms, 3.2 seconds, 1m30s, 5 m",
	"see /tmp/pytest-of-x/a.py: and a/tmp/b and /var/folders/xy/z", "x2024-01-31 ab2024 _12345678 p1d",
	"café 0x12 0xZZ 1e10 3 failed", "\x1b[1;32m1234567890abcdef\x1b[m", "pid\n123", "line\r\n\r\n  \t\n",
	"12 seconds 2024/01/31 7:05 3µs 1234567 12\t9", "line 1234567-2 9/10 5. 42:x 7,5",
	"50%|█████     | 5/10\r100%|██████████| 10/10 [00:01<00:00, 9.87it/s]\n", "a\rb\r\nc\r", "3.2 MB/s 12 ms 450it/s",
	"listening on 127.0.0.1:43121 and localhost:8080, [::1]:9000, port 5432, port=61000, a.py:42",
	"commit 3f9a2b1 deadbee 1234567 abcdef0", "Attempt 3 of 5, retry #2, In [12]: Out[12]: try 4 entry 5",
	"wrote /home/u/tmpk3j4h5z/x.py and /w/tmpfile.txt and tmp123456789",
	"Chunk ID: a1b2c3\nWall time: 0.0000 seconds\nOutput:\nok", `{"durationMs":101,"requestId":"r-7","id":{"a":1},"x_id":""}`,
	"std::id x-request-id=r-77, elapsed:\t3 ID:'q' id=\"open", "created_at: 12 time: [1] uptime:",
}

func TestAppendNormalizedMatchesReference(t *testing.T) {
	for _, s := range normalizeCases {
		if got, want := string(appendNormalized(nil, s)), string(appendNormalizedRef(nil, s)); got != want {
			t.Errorf("appendNormalized(%q) = %q; want %q", s, got, want)
		}
	}
}

func FuzzAppendNormalized(f *testing.F) {
	for _, s := range normalizeCases {
		f.Add(s)
	}
	for _, s := range corpusResults(f) {
		f.Add(s)
	}
	if cases, err := filepath.Glob("testdata/parse/*.json"); err == nil {
		for _, p := range cases {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(string(b))
			}
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, want := string(appendNormalized([]byte("x"), s)), string(appendNormalizedRef([]byte("x"), s))
		if got != want {
			t.Fatalf("appendNormalized(%q) = %q; want %q", s, got, want)
		}
		if h, want := hashNormalized(s), normalizedHash(appendNormalizedRef(nil, s)); h != want {
			t.Fatalf("hashNormalized(%q) = %x; want %x", s, h, want)
		}
	})
}

// tempPathLenRef, rateLenRef, numberInContextRef and durationLenRef are
// the helpers as they were before their fast exits; FuzzNormalizeHelpers
// holds the fast ones to them.
func tempPathLenRef(s string) int {
	n := 0
	for n < len(s) && !strings.ContainsRune(" \t\n'\":,;)]}>", rune(s[n])) {
		n++
	}
	for _, p := range [...]string{"/tmp/", "/var/tmp/", "/var/folders/", "/private/tmp/", "/dev/shm/"} {
		if strings.HasPrefix(s, p) {
			return n
		}
	}
	for p := s[:n]; p != ""; {
		var comp string
		comp, p = cutAny(p, "/")
		if tempName(comp) {
			return n
		}
	}
	return 0
}

func rateLenRef(t string) int {
	j := 0
	for j < len(t) && (isDigit(t[j]) || t[j] == '.') {
		j++
	}
	if j < len(t) && t[j] == ' ' {
		j++
	}
	for _, u := range rateUnits {
		if strings.HasPrefix(t[j:], u) && (j+len(u) == len(t) || !isWordByte(t[j+len(u)])) {
			return j + len(u)
		}
	}
	return 0
}

func numberInContextRef(s string, i, j int) (string, int) {
	if i == 0 || j-i > 5 {
		return "", 0
	}
	for k := i; k < j; k++ {
		if !isDigit(s[k]) {
			return "", 0
		}
	}
	if s[i-1] == ':' && hostBefore(s[:i-1]) {
		return "<port>", j - i
	}
	// The word before, across a few separators.
	k := i
	for k > 0 && i-k < 4 && strings.IndexByte(" =#:[\"", s[k-1]) >= 0 {
		k--
	}
	if k == i || k == 0 || !isWordByte(s[k-1]) {
		return "", 0
	}
	w := k
	for w > 0 && isWordByte(s[w-1]) && k-w <= 16 {
		w--
	}
	if w > 0 && isWordByte(s[w-1]) {
		return "", 0
	}
	word := s[w:k]
	if s[i-1] == '[' {
		if strings.EqualFold(word, "in") || strings.EqualFold(word, "out") {
			return "<n>", j - i
		}
		return "", 0
	}
	if strings.EqualFold(word, "port") {
		return "<port>", j - i
	}
	for _, cw := range counterWords {
		if strings.EqualFold(word, cw) {
			return "<n>", j - i
		}
	}
	return "", 0
}

// FuzzNormalizeHelpers holds tempPathLen, rateLen, durationLen and
// numberInContext to their references at every offset of s (and for
// numberInContext every short span), so that volatileToken, which
// appendNormalizedRef shares, reads as it did.
func FuzzNormalizeHelpers(f *testing.F) {
	for _, s := range normalizeCases {
		f.Add(s)
	}
	for _, s := range corpusResults(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := range len(s) + 1 {
			if got, want := tempPathLen(s[i:]), tempPathLenRef(s[i:]); got != want {
				t.Fatalf("tempPathLen(%q) = %d; want %d", s[i:], got, want)
			}
			if got, want := rateLen(s[i:]), rateLenRef(s[i:]); got != want {
				t.Fatalf("rateLen(%q) = %d; want %d", s[i:], got, want)
			}
			if got, want := durationLen(s[i:]), durationLenRef(s[i:]); got != want {
				t.Fatalf("durationLen(%q) = %d; want %d", s[i:], got, want)
			}
			for j := i; j <= min(len(s), i+7); j++ {
				repl, n := numberInContext(s, i, j)
				wantRepl, wantN := numberInContextRef(s, i, j)
				if repl != wantRepl || n != wantN {
					t.Fatalf("numberInContext(%q, %d, %d) = %q, %d; want %q, %d", s, i, j, repl, n, wantRepl, wantN)
				}
			}
		}
	})
}

// TestCharBits: the table isWordByte, isDigit and isHex read says what
// their comparisons said, for every byte.
func TestCharBits(t *testing.T) {
	for c := range 256 {
		b := byte(c)
		digit := b >= '0' && b <= '9'
		word := digit || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '_'
		hex := digit || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F'
		if isWordByte(b) != word || isDigit(b) != digit || isHex(b) != hex {
			t.Errorf("byte %#x: isWordByte, isDigit, isHex = %v, %v, %v; want %v, %v, %v", b, isWordByte(b), isDigit(b), isHex(b), word, digit, hex)
		}
	}
}

func durationLenRef(t string) int {
	// Fast exit: a duration has a unit letter right after its number.
	e := 0
	for e < len(t) && (isDigit(t[e]) || t[e] == '.') {
		e++
	}
	if e < len(t) && t[e] == ' ' {
		e++
	}
	if e >= len(t) || !(t[e] >= 'a' && t[e] <= 'z' || t[e] == 0xc2) {
		return 0
	}
	k := 0
	matched := false
	for {
		j := k
		for j < len(t) && isDigit(t[j]) {
			j++
		}
		if j == k {
			break
		}
		frac := false
		if j+1 < len(t) && t[j] == '.' && isDigit(t[j+1]) {
			j++
			for j < len(t) && isDigit(t[j]) {
				j++
			}
			frac = true
		}
		sp := j
		if sp < len(t) && t[sp] == ' ' {
			sp++
		}
		unit := ""
		for _, u := range durationUnits {
			at := j
			if len(u) >= 2 { // units of two letters or more may follow a space: "3.2 seconds", "12 ms"
				at = sp
			}
			if at < len(t) && t[at] == u[0] && strings.HasPrefix(t[at:], u) && (at+len(u) == len(t) || !isWordByte(t[at+len(u)]) || isDigit(t[at+len(u)])) {
				// a bare "m"/"h"/"s" needs a fraction or a following number (1m30s) to be a duration
				if len(u) == 1 && !frac && !(at+1 < len(t) && isDigit(t[at+1])) && u != "s" {
					continue
				}
				unit = u
				k = at + len(u)
				break
			}
		}
		if unit == "" {
			break
		}
		matched = true
	}
	if !matched {
		return 0
	}
	return k
}
