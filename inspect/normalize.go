package inspect

import (
	"strings"
	"sync"

	"github.com/tidwall/gjson"
	"github.com/zeebo/xxh3"
)

// appendNormalized writes s with its volatile parts replaced, so that two
// runs of the same command that differ only in when, where and as which
// process they ran compare equal: ANSI colour codes, timestamps and dates,
// UUIDs, hex ids (8+ hex digits), memory addresses, durations, PIDs, temp
// paths, the values of labels that name runtime detail (`Chunk ID: 3fa9c1`,
// `"durationMs": 101`, `request_id=r-77`: see labelledValue) and trailing
// whitespace. Other numbers are kept: "3 failed" and "2 failed" are
// different results.
func appendNormalized(dst []byte, s string) []byte {
	// Bytes are copied in runs: only a word that may be volatile, a '/'
	// that may start a temp path, a ':' or '=' that may follow a label,
	// ESC, CR and LF stop a run. A word is
	// volatile only if it starts a word and begins with a digit, is all hex
	// digits (8+) or spells "pid"; every other word, most of any text, is
	// skipped whole.
	run := 0              // start of the bytes not yet copied
	lineStart := len(dst) // where the current line starts in dst
	for i := 0; i < len(s); {
		// Skip to the next byte that may start something: ESC, CR, LF,
		// '/', or a digit, a-f, A-F, p or P that starts a word (the rest
		// of a word never starts one). prev is bkWord (1) when s[i-1] is
		// a word byte, else 0: the test is branch-free, one table read a
		// byte.
		prev := uint8(0)
		if i > 0 {
			prev = charBits[s[i-1]] & bkWord
		}
		for i < len(s) {
			f := charBits[s[i]]
			if f&(bkStop|bkStart&^(prev*bkStart)) != 0 {
				break
			}
			prev = f & bkWord
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if charBits[c]&bkStop == 0 {
			// The bits every byte of the word has: digits, hex digits.
			j, all := i+1, charBits[c]
			for j < len(s) && charBits[s[j]]&bkWord != 0 {
				all &= charBits[s[j]]
				j++
			}
			hexOnly, digits := all&bkHex != 0, all&bkDigit != 0
			if digits && j-i < 8 && (j == len(s) || !numberGoesOn[s[j]]) {
				// A short plain number (a line number, a count) that no
				// date, time or duration continues: kept, and the most
				// common number in tool output, unless what comes before
				// makes it a port or a counter.
				if repl, n := numberInContext(s, i, j); n > 0 {
					dst = append(dst, s[run:i]...)
					dst = append(dst, repl...)
					i += n
					run = i
					continue
				}
				i = j
				continue
			}
			if isDigit(c) || hexOnly && j-i >= 7 || j-i == 3 && (c == 'p' || c == 'P') {
				if repl, n := volatileToken(s, i); n > 0 {
					dst = append(dst, s[run:i]...)
					dst = append(dst, repl...)
					i += n
					run = i
					continue
				}
			}
			i = j
			continue
		}
		switch c {
		case 0x1b: // ANSI escape: ESC [ params final-byte
			dst = append(dst, s[run:i]...)
			j := i + 1
			if j < len(s) && s[j] == '[' {
				j++
				for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
					j++
				}
				j++
			}
			i = min(j, len(s))
			run = i
		case '\r':
			dst = append(dst, s[run:i]...)
			if i+1 < len(s) && s[i+1] != '\n' {
				// A carriage return redraws the line (progress bars,
				// spinners): only what is drawn last stays on screen.
				dst = dst[:lineStart]
			}
			i++
			run = i
		case '\n':
			dst = trimTrailingBlank(append(dst, s[run:i]...))
			dst = append(dst, '\n')
			lineStart = len(dst)
			i++
			run = i
		case '/':
			if i == 0 || !isWordByte(s[i-1]) {
				if n := tempPathLen(s[i:]); n > 0 {
					dst = append(dst, s[run:i]...)
					dst = append(dst, "<tmp>"...)
					i += n
					run = i
					continue
				}
			}
			i++
		default: // ':' or '='
			if vs, ve := labelledValue(s, i); ve > 0 {
				dst = append(dst, s[run:vs]...)
				dst = append(dst, "<v>"...)
				i = ve
				run = i
				continue
			}
			i++
		}
	}
	return trimTrailingBlank(append(dst, s[run:]...))
}

// labelledValue finds the value after the ':' or '=' at s[i] when the
// label before it names runtime detail: an id, a time, a duration or a
// working directory, as in Codex's `Chunk ID: 3fa9c1`, a JSON result's
// `"durationMs": 101` or `"requestId": "r-77"`, or `elapsed=3`. Such a
// value changes on every run of the same command with the same outcome,
// whatever its shape (six hex digits, a short number), so the label and
// not the value says it is volatile. It returns the value's bounds
// (without quotes), or ve == 0 when there is none to replace: another
// label, an object or array value, a value that runs on past a line.
func labelledValue(s string, i int) (vs, ve int) {
	k := i
	if k > 0 && (s[k-1] == '"' || s[k-1] == '\'') {
		k--
	}
	end := k
	for k > 0 && end-k <= maxLabel && (isWordByte(s[k-1]) || s[k-1] == '-') {
		k--
	}
	if k == end || end-k > maxLabel || !volatileLabel(s[k:end]) {
		return 0, 0
	}
	j := i + 1
	if s[i] == ':' && j < len(s) && s[j] == ':' {
		return 0, 0 // a scope (std::x), not a label
	}
	for n := 0; j < len(s) && n < 8 && (s[j] == ' ' || s[j] == '\t'); n++ {
		j++
	}
	if j == len(s) {
		return 0, 0
	}
	if q := s[j]; q == '"' || q == '\'' {
		for e := j + 1; e < len(s) && e-j <= maxLabelledValue; e++ {
			switch s[e] {
			case q:
				if e == j+1 {
					return 0, 0
				}
				return j + 1, e
			case '\n':
				return 0, 0
			}
		}
		return 0, 0
	}
	e := j
	for e < len(s) && e-j <= maxLabelledValue && !valueEnds[s[e]] {
		e++
	}
	if e == j || e-j > maxLabelledValue {
		return 0, 0
	}
	return j, e
}

// maxLabel and maxLabelledValue bound what labelledValue reads: labels
// are a word or two, the values ids and numbers.
const (
	maxLabel         = 40
	maxLabelledValue = 128
)

// valueEnds marks the bytes that end an unquoted labelled value.
var valueEnds = [256]bool{' ': true, '\t': true, '\n': true, '\r': true, ',': true, ';': true, '}': true, ']': true,
	')': true, '"': true, '\'': true, '{': true, '[': true, '<': true, '>': true, '|': true}

// volatileLabel reports whether a label names runtime detail, by its last
// part (after '_' or '-', or the last capital of camelCase: requestId,
// elapsed_ms, x-request-id, Chunk ID): an id, a time or a duration, a
// working directory. A unit or "at" names one only after another part
// (durationMs, created_at), never alone ("ms: 3" is a count of them).
func volatileLabel(label string) bool {
	if len(label) < 2 {
		return false
	}
	seg := len(label) - 1
	for seg > 0 {
		c, p := label[seg], label[seg-1]
		if p == '_' || p == '-' || 'A' <= c && c <= 'Z' && 'a' <= p && p <= 'z' {
			break
		}
		seg--
	}
	last := label[seg:]
	var buf [16]byte
	if len(last) > len(buf) || !isASCII(last) {
		return false
	}
	b := buf[:len(last)]
	for n := range len(last) {
		b[n] = lowerASCII(last[n])
	}
	switch string(b) {
	case "id", "uuid", "guid", "pid", "ppid", "pgid", "tid", "time", "timestamp", "ts", "date", "datetime",
		"elapsed", "duration", "took", "latency", "uptime", "cwd", "workdir", "tmpdir", "seq":
		return true
	case "ms", "us", "ns", "sec", "secs", "seconds", "at":
		return seg > 0
	}
	return false
}

// numberGoesOn flags the bytes after a run of digits that may make it a
// date (2024-01-31, 2024/01/31), a time (12:00), a fraction or a duration
// (0.5s, 3 seconds, 12µs): only then does volatileToken need to look.
var numberGoesOn = [256]bool{'-': true, '/': true, ':': true, '.': true, ' ': true, 0xc2: true}

// wordEnd returns the index of the first non-word byte at or after i.
func wordEnd(s string, i int) int {
	for i < len(s) && isWordByte(s[i]) {
		i++
	}
	return i
}

func trimTrailingBlank(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// isWordByte, isDigit and isHex read a table: they run for most bytes
// of every tool result, where a chain of comparisons costs branches.
func isWordByte(c byte) bool { return charBits[c]&bkWord != 0 }

func isDigit(c byte) bool { return charBits[c]&bkDigit != 0 }

func isHex(c byte) bool { return charBits[c]&bkHex != 0 }

// Bits of charBits.
const (
	bkWord  = 1 << iota // 0-9, a-z, A-Z, '_'
	bkDigit             // 0-9
	bkHex               // 0-9, a-f, A-F
	bkStop              // ESC, CR, LF, '/', ':', '=': appendNormalized looks at each
	bkStart             // may start a volatile word: 0-9, a-f, A-F, p, P
)

var charBits = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		if b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '_' {
			t[c] |= bkWord
		}
		if b >= '0' && b <= '9' {
			t[c] |= bkDigit
		}
		if b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F' {
			t[c] |= bkHex | bkStart
		}
		if b == 'p' || b == 'P' {
			t[c] |= bkStart
		}
		if b == 0x1b || b == '\r' || b == '\n' || b == '/' || b == ':' || b == '=' {
			t[c] |= bkStop
		}
	}
	return t
}()

// tempPathLen returns the length of a temporary path at the start of s:
// under a temp directory, or with a component that tempfile named
// (/home/u/tmpk3j4h5z/x.py).
func tempPathLen(s string) int {
	n := 0
	for n < len(s) && !pathEnds[s[n]] {
		n++
	}
	// Most paths name no temp file: one under a temp directory whose
	// name holds no "tmp" starts with /var or /dev, and a tempName
	// starts with "tmp" (no byte of these prefixes ends a path, so
	// s[:n] holds them).
	if !strings.Contains(s[:n], "tmp") && !strings.HasPrefix(s, "/var/") && !strings.HasPrefix(s, "/dev/") {
		return 0
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

// pathEnds marks the bytes that end a path in tool output.
var pathEnds = [256]bool{' ': true, '\t': true, '\n': true, '\'': true, '"': true, ':': true, ',': true, ';': true, ')': true, ']': true, '}': true, '>': true}

// tempName reports a name that Python's tempfile or mktemp made: "tmp"
// and 6 or more random letters and digits, a digit among them.
func tempName(c string) bool {
	if len(c) < 9 || len(c) > 20 || !strings.HasPrefix(c, "tmp") {
		return false
	}
	digit := false
	for i := 3; i < len(c); i++ {
		if !isWordByte(c[i]) {
			return false
		}
		digit = digit || isDigit(c[i])
	}
	return digit
}

// volatileToken recognises a volatile token starting at word boundary i
// and returns its replacement and length.
func volatileToken(s string, i int) (string, int) {
	t := s[i:]
	// 0x7ffd1234 memory addresses and hex literals.
	if len(t) > 3 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X') && isHex(t[2]) {
		n := 2
		for n < len(t) && isHex(t[n]) {
			n++
		}
		if n >= 6 {
			return "<addr>", n
		}
	}
	if n := uuidLen(t); n > 0 {
		return "<uuid>", n
	}
	if isDigit(t[0]) {
		if n := dateTimeLen(t); n > 0 {
			return "<ts>", n
		}
		if n := durationLen(t); n > 0 {
			return "<dur>", n
		}
		if n := rateLen(t); n > 0 {
			return "<rate>", n
		}
	}
	if i > 0 {
		if repl, n := numberInContext(s, i, i+wordEnd(t, 0)); n > 0 {
			return repl, n
		}
	}
	// hex ids: a word of 8+ hex digits with at least one digit (git
	// hashes, container ids); plain words like "deadbeef" stay.
	n, digits := 0, 0
	for n < len(t) && isHex(t[n]) {
		if isDigit(t[n]) {
			digits++
		}
		n++
	}
	// 7 digits are a short git hash (git log --oneline) when a letter is
	// among them.
	if n >= 7 && digits > 0 && digits < n && (n == len(t) || !isWordByte(t[n])) {
		return "<hex>", n
	}
	if n >= 7 && digits == n && n < 10 {
		return "", 0 // a plain number (line count, size): keep it
	}
	// Epoch timestamps in seconds or milliseconds, with their fraction
	// (Python's time.time(): 1732712400.123456).
	if digits == n && n >= 10 && (n == len(t) || !isWordByte(t[n])) {
		if n+1 < len(t) && t[n] == '.' && isDigit(t[n+1]) {
			n++
			for n < len(t) && isDigit(t[n]) {
				n++
			}
		}
		return "<ts>", n
	}
	// pid 1234, pid=1234, PID: 1234
	if len(t) >= 3 && strings.EqualFold(t[:3], "pid") && (len(t) == 3 || !isWordByte(t[3])) {
		j := 3
		for j < len(t) && (t[j] == ' ' || t[j] == '=' || t[j] == ':' || t[j] == '"') {
			j++
		}
		k := j
		for k < len(t) && isDigit(t[k]) {
			k++
		}
		if k > j {
			return "pid <pid>", k
		}
	}
	return "", 0
}

func uuidLen(t string) int {
	if len(t) < 36 {
		return 0
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if t[i] != '-' {
				return 0
			}
		default:
			if !isHex(t[i]) {
				return 0
			}
		}
	}
	return 36
}

func digitsAt(t string, i, n int) bool {
	if i+n > len(t) {
		return false
	}
	for k := i; k < i+n; k++ {
		if !isDigit(t[k]) {
			return false
		}
	}
	return true
}

// dateTimeLen matches 2024-01-31, 2024-01-31T12:00:00.123Z, 12:00:00(.123)
// and 2024/01/31 at the start of t.
func dateTimeLen(t string) int {
	n := 0
	if digitsAt(t, 0, 4) && len(t) > 7 && (t[4] == '-' || t[4] == '/') && digitsAt(t, 5, 2) && len(t) > 8 && t[7] == t[4] && digitsAt(t, 8, 2) {
		n = 10
		if len(t) > n+1 && (t[n] == 'T' || t[n] == ' ') && digitsAt(t, n+1, 2) && len(t) > n+3 && t[n+3] == ':' {
			n++
		} else {
			return n
		}
	}
	// hh:mm(:ss(.fff))
	j := n
	k := j
	for k < len(t) && k-j < 2 && isDigit(t[k]) {
		k++
	}
	if k == j || k >= len(t) || t[k] != ':' || !digitsAt(t, k+1, 2) {
		if n > 0 {
			return n - 1
		}
		return 0
	}
	k += 3
	if k < len(t) && t[k] == ':' && digitsAt(t, k+1, 2) {
		k += 3
	}
	if k < len(t) && (t[k] == '.' || t[k] == ',') && k+1 < len(t) && isDigit(t[k+1]) {
		k++
		for k < len(t) && isDigit(t[k]) {
			k++
		}
	}
	if k < len(t) && t[k] == 'Z' {
		k++
	} else if k+5 < len(t)+1 && k < len(t) && (t[k] == '+' || t[k] == '-') && digitsAt(t, k+1, 2) {
		k += 3
		if k < len(t) && t[k] == ':' {
			k++
		}
		if digitsAt(t, k, 2) {
			k += 2
		}
	}
	if k < len(t) && isWordByte(t[k]) {
		return 0
	}
	return k
}

// rateUnits follow a number that measures speed: download and progress
// bar rates change from run to run.
var rateUnits = [...]string{"it/s", "s/it", "B/s", "kB/s", "KB/s", "MB/s", "GB/s", "KiB/s", "MiB/s", "GiB/s", "req/s", "ops/s"}

// rateLen matches 45.12it/s, 3.2 MB/s at the start of t.
func rateLen(t string) int {
	j := 0
	for j < len(t) && (isDigit(t[j]) || t[j] == '.') {
		j++
	}
	if j < len(t) && t[j] == ' ' {
		j++
	}
	// Most numbers are followed by no unit at all.
	if j == len(t) || !rateUnitStarts[t[j]] {
		return 0
	}
	for _, u := range rateUnits {
		if strings.HasPrefix(t[j:], u) && (j+len(u) == len(t) || !isWordByte(t[j+len(u)])) {
			return j + len(u)
		}
	}
	return 0
}

// rateUnitStarts marks the first bytes of rateUnits.
var rateUnitStarts = func() (t [256]bool) {
	for _, u := range rateUnits {
		t[u[0]] = true
	}
	return t
}()

// counterWords come before a number that counts calls rather than
// results: the retry a wrapper reports, a notebook's execution count.
var counterWords = [...]string{"attempt", "retry", "try", "iteration", "round", "call", "execution_count"}

// numberInContext recognises a short number s[i:j] made volatile by what
// precedes it: a port after a local host or the word port, a counter
// ("attempt 3", "retry #2"), a notebook cell's In [12] / Out[12].
func numberInContext(s string, i, j int) (string, int) {
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
	for k > 0 && i-k < 4 && contextSeps[s[k-1]] {
		k--
	}
	if k == i || k == 0 || !contextWordEnds[s[k-1]] {
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
	// A word of no length the words below have is none of them: most
	// words before a number. Nor is one of another length or first
	// letter (word is ASCII: c|0x20 lowers a letter).
	if contextWordLens&(1<<len(word)) == 0 {
		return "", 0
	}
	if len(word) == len("port") && word[0]|0x20 == 'p' && strings.EqualFold(word, "port") {
		return "<port>", j - i
	}
	for _, cw := range counterWords {
		if len(word) == len(cw) && word[0]|0x20 == cw[0] && strings.EqualFold(word, cw) {
			return "<n>", j - i
		}
	}
	return "", 0
}

// contextSeps may separate a number from the word that makes it
// volatile.
var contextSeps = [256]bool{' ': true, '=': true, '#': true, ':': true, '[': true, '"': true}

// contextWordEnds marks the last letters, either case, of the words
// numberInContext looks for: most words before a number end otherwise.
var contextWordEnds = func() (t [256]bool) {
	for _, w := range append([]string{"port", "in", "out"}, counterWords[:]...) {
		t[w[len(w)-1]] = true
		t[w[len(w)-1]&^0x20] = true
	}
	return t
}()

// contextWordLens has bit n set when "port" or a counter word has n
// bytes.
var contextWordLens = func() (m uint64) {
	m = 1 << len("port")
	for _, cw := range counterWords {
		m |= 1 << len(cw)
	}
	return m
}()

// hostBefore reports whether s ends with a local host name or an IP
// address: the number after "localhost:" or "127.0.0.1:" is a port.
func hostBefore(s string) bool {
	for _, h := range [...]string{"localhost", "]"} {
		if strings.HasSuffix(s, h) {
			return true
		}
	}
	dots, k := 0, len(s)
	for k > 0 && (isDigit(s[k-1]) || s[k-1] == '.') {
		if s[k-1] == '.' {
			dots++
		}
		k--
	}
	return dots == 3 && k < len(s) && (k == 0 || !isWordByte(s[k-1]))
}

var durationUnits = [...]string{"seconds", "second", "secs", "sec", "ms", "µs", "us", "ns", "minutes", "mins", "min", "s", "m", "h"}

// durationUnitStarts marks the first bytes of durationUnits.
var durationUnitStarts = func() (t [256]bool) {
	for _, u := range durationUnits {
		t[u[0]] = true
	}
	return t
}()

// durationLen matches 0.53s, 12ms, 3.2 seconds, 1m30s at the start of t.
func durationLen(t string) int {
	// Fast exit: a duration has a unit letter right after its number.
	e := 0
	for e < len(t) && (isDigit(t[e]) || t[e] == '.') {
		e++
	}
	if e < len(t) && t[e] == ' ' {
		e++
	}
	if e >= len(t) || !durationUnitStarts[t[e]] {
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

// negativeResult reports an empty or "nothing found" result: the
// no-progress answer of a search that keeps missing.
func negativeResult(s string) bool {
	t := outputText(s)
	if t == "" {
		return true
	}
	if len(t) > 200 {
		return false
	}
	l := strings.ToLower(t)
	for _, p := range [...]string{"no matches", "no match found", "not found", "no results", "0 results", "no files found", "no such file", "nothing found", "found 0", "0 matches", "does not exist", "no file"} {
		if strings.Contains(l, p) {
			return true
		}
	}
	return false
}

// resultText is the text a result's rules read: Codex's JSON shell
// result {"output": ..., "metadata": {"exit_code": N}} unwrapped to its
// output behind an "exit code N" line, as other agents print it (its
// duration would make every result differ); any other result as it is.
func resultText(res string) string {
	if len(res) < 2 || res[0] != '{' || !strings.Contains(res, `"metadata"`) {
		return res
	}
	o := gjson.Get(res, "output")
	if o.Type != gjson.String {
		return res
	}
	if code := gjson.Get(res, "metadata.exit_code"); code.Type == gjson.Number {
		return "exit code " + code.Raw + "\n" + o.Str
	}
	return o.Str
}

// outputText is what a command printed, without the wrappers agents put
// around it: mini-swe-agent's <returncode>/<output> tags, Codex's JSON
// {"output": ..., "metadata": {"exit_code": ...}}.
func outputText(res string) string {
	t := strings.TrimSpace(res)
	if strings.HasPrefix(t, "{") && strings.Contains(t, `"output"`) && strings.Contains(t, `"metadata"`) {
		if o := gjson.Get(t, "output"); o.Type == gjson.String {
			return strings.TrimSpace(o.Str)
		}
	}
	t = strings.TrimSpace(stripReturnCode(t))
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(t, "<output>"), "</output>"))
}

func stripReturnCode(t string) string {
	if strings.HasPrefix(t, "<returncode>") {
		if i := strings.Index(t, "</returncode>"); i >= 0 {
			return strings.TrimSpace(t[i+len("</returncode>"):])
		}
	}
	return t
}

// normBufs holds scratch for withNormalized, which runs outside any parser
// or inspection (Call.ResultFingerprint is lazy).
var normBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8192); return &b }}

// hashNormalized is the normalizedHash of appendNormalized(nil, s).
func hashNormalized(s string) (h uint64) {
	withNormalized(s, func(b []byte) { h = normalizedHash(b) })
	return h
}

// normalizedHash hashes a normalised result: results are long, and their
// fingerprints are compared within one process only (Call.resultFP), so
// the hash is xxh3, at memory speed, not the FNV of call fingerprints.
func normalizedHash(b []byte) uint64 { return xxh3.Hash(b) }

// withNormalized calls fn with appendNormalized(nil, s), in pooled memory
// that fn must not keep.
func withNormalized(s string, fn func(b []byte)) {
	bp := normBufs.Get().(*[]byte)
	b := appendNormalized((*bp)[:0], s)
	fn(b)
	if cap(b) <= 1<<20 { // keep the pool from pinning one huge result
		*bp = b[:0]
		normBufs.Put(bp)
	}
}
