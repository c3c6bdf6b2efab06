package inspect

import (
	"bytes"
	"math/bits"
	"strings"
)

// Error classification: whether a tool result reports a failure, and the
// signature (error type and normalised message) that error_cycle and
// whack_a_mole compare.

// errorInfo is the classification of one tool result.
type errorInfo struct {
	isError bool
	kind    string // error type: exception name, "exit", "error", marker
	line    string // the error line as found (a view into the result)
}

// classifyError decides whether a tool result reports a failure. Only the
// head and the tail are read: markers sit at the start (exit codes, "Error:")
// or at the end (the exception line of a traceback), and results can be
// hundreds of kilobytes.
func classifyError(s string) errorInfo {
	const headN, tailN = 1024, 2048
	head, tail := s, ""
	if len(s) > headN+tailN {
		head, tail = s[:headN], s[len(s)-tailN:]
	}
	var ei errorInfo
	exit := exitCode(head)
	if exit == "" && tail != "" {
		exit = exitCode(tail)
	}
	if exit == "0" {
		// The process said it succeeded: error text in its output is what
		// it printed (a repro script showing the bug), not a failed call.
		return ei
	}
	if exit != "" {
		ei.isError, ei.kind = true, "exit "+exit
	}
	// A traceback's last exception line names the error.
	if strings.Contains(head, "Traceback (most recent call last)") || strings.Contains(tail, "Traceback (most recent call last)") {
		ei.isError = true
		if k, l := lastException(s, tail); k != "" {
			ei.kind, ei.line = k, l
			return ei
		}
		ei.kind = "Traceback"
	}
	if k, l := markerLine(head); k != "" {
		ei.isError, ei.kind, ei.line = true, k, l
		return ei
	}
	if tail != "" {
		if k, l := markerLine(tail); k != "" {
			ei.isError, ei.kind, ei.line = true, k, l
			return ei
		}
	}
	if ei.isError && ei.line == "" {
		ei.line = lastOutputLine(s)
	}
	return ei
}

// exitCode finds a process exit status: <returncode>1</returncode>,
// "exit code 1", "Exit code: 1", "exit status 2", "exited with code 1".
// The phrases are tried in exitPhrases order, each at its first
// occurrence, as one strings.Index per phrase would; but they are found in
// one pass: every phrase has an 'x' second, a rare byte in tool output.
func exitCode(s string) string {
	if i := strings.Index(s, "<returncode>"); i >= 0 {
		j := i + len("<returncode>")
		k := j
		for k < len(s) && (isDigit(s[k]) || s[k] == '-') {
			k++
		}
		if k > j {
			return s[j:k]
		}
	}
	var first [len(exitPhrases)]int
	found := 0
	for j := 1; j < len(s); j++ {
		x := strings.IndexByte(s[j:], 'x')
		if x < 0 {
			break
		}
		j += x
		if c := s[j-1]; c != 'e' && c != 'E' {
			continue
		}
		for p, ph := range exitPhrases {
			if first[p] == 0 && strings.HasPrefix(s[j-1:], ph) {
				first[p] = j // index+1 of the phrase: 0 means not seen
				found++
			}
		}
		if found == len(exitPhrases) {
			break
		}
	}
	for p, ph := range exitPhrases {
		if first[p] == 0 {
			continue
		}
		j := first[p] - 1 + len(ph)
		for j < len(s) && (s[j] == ' ' || s[j] == ':' || s[j] == '=' || s[j] == '"') {
			j++
		}
		k := j
		for k < len(s) && (isDigit(s[k]) || s[k] == '-') {
			k++
		}
		if k > j {
			return s[j:k]
		}
	}
	return ""
}

// exitPhrases introduce an exit status, in the order exitCode tries them.
// "exit_code" is Codex's JSON output metadata.
var exitPhrases = [...]string{"exit code", "Exit code", "exit status", "Exit status", "exited with code", "Exit Code", "exitCode", "exit_code"}

// lastException finds the last "FooError: message" line.
func lastException(s, tail string) (string, string) {
	if tail == "" {
		tail = s
	}
	for rest := tail; rest != ""; {
		i := strings.LastIndexByte(rest, '\n')
		line := strings.TrimSpace(rest[i+1:])
		if i < 0 {
			rest = ""
		} else {
			rest = rest[:i]
		}
		if k := exceptionName(line); k != "" {
			return k, line
		}
	}
	return "", ""
}

// exceptionName returns "ValueError" for "ValueError: bad" or
// "pkg.mod.CustomException: x", "" otherwise.
func exceptionName(line string) string {
	// The name runs to the first ':'. A space before it makes the line
	// prose, and so does a space anywhere in a line without a colon: only
	// the first word is read, not the whole line.
	i := 0
	for i < len(line) && line[i] != ':' && line[i] != ' ' {
		i++
	}
	if i < len(line) && line[i] == ' ' {
		return ""
	}
	if i == len(line) || i == 0 {
		if isExceptionIdent(line) {
			return line // "KeyboardInterrupt"
		}
		return ""
	}
	name := line[:i]
	if j := strings.LastIndexByte(name, '.'); j >= 0 {
		name = name[j+1:]
	}
	if isExceptionIdent(name) {
		return name
	}
	return ""
}

func isExceptionIdent(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isWordByte(s[i]) {
			return false
		}
	}
	return strings.HasSuffix(s, "Error") || strings.HasSuffix(s, "Exception") || s == "KeyboardInterrupt" || s == "SystemExit" || strings.HasSuffix(s, "Failure")
}

// errorMarkers are substrings that make a line an error line, with the
// error type they stand for. Checked in order.
var errorMarkers = [...]struct{ sub, kind string }{
	{"panic: ", "panic"},
	{"SyntaxError", "SyntaxError"},
	{"command not found", "command not found"},
	{"No such file or directory", "ENOENT"},
	{"Permission denied", "EACCES"},
	{"old_str not found", "edit no match"},
	{"old_string not found", "edit no match"},
	{"did not appear verbatim", "edit no match"},
	{"No replacement was performed", "edit no match"},
	{"String to replace not found", "edit no match"},
	{"does not match anything in the file", "edit no match"},
	{"tool execution failed", "tool error"},
	{"<tool_use_error>", "tool error"},
	{"could not find", "not found"},
	{"Could not find", "not found"},
	{"FAILED", "FAILED"},
	{"fatal: ", "fatal"},
}

// markerLine scans the lines of s for an error marker. Every line gets
// the prefix and exception-name checks, which read only its start; the
// errorMarkers, which may sit anywhere in a line, are found for the whole
// of s in one pass (nextMarker), and only the line holding the next
// occurrence is compared with each of them, in order.
func markerLine(s string) (string, string) {
	m := nextMarker(s, 0)
	for pos := 0; pos < len(s); {
		end, next := len(s), len(s)
		if i := strings.IndexByte(s[pos:], '\n'); i >= 0 {
			end, next = pos+i, pos+i+1
		}
		if t := strings.TrimSpace(s[pos:end]); t != "" {
			t = strings.TrimPrefix(t, "<output>")
			if hasPrefixFold(t, "error:") || hasPrefixFold(t, "error ") || strings.HasPrefix(t, "ERROR") || strings.HasPrefix(t, "E   ") {
				if len(t) <= len("ERROR:") && next < len(s) {
					// A bare "ERROR:" heads the message on the next lines
					// (OpenHands' editor): read on for what failed.
					if k, l := markerLine(s[next:]); k != "" {
						return k, l
					}
				}
				return "error", t
			}
			if strings.HasPrefix(t, "FAIL ") || strings.HasPrefix(t, "--- FAIL") || strings.HasPrefix(t, "npm ERR!") {
				return "FAIL", t // jest, go test, npm
			}
			if k := exceptionName(t); k != "" {
				return k, t
			}
			if m < end {
				// A marker starts in this line (markers hold no newline);
				// trimming may still have cut it ("fatal: " at the end).
				for _, mk := range errorMarkers {
					if strings.Contains(t, mk.sub) {
						return mk.kind, t
					}
				}
			}
		}
		if m < next {
			m = nextMarker(s, next)
		}
		pos = next
	}
	return "", ""
}

// markerFirst and markerSecond flag, for each byte, the errorMarkers
// (bit k: errorMarkers[k]) whose first or second byte it is: a position
// where both flags share a bit is worth a comparison.
var markerFirst, markerSecond = func() (f, s [256]uint32) {
	for k, m := range errorMarkers {
		f[m.sub[0]] |= 1 << k
		s[m.sub[1]] |= 1 << k
	}
	return f, s
}()

// markerFirst holds one bit per marker.
var _ = [32 - len(errorMarkers)]struct{}{}

// minMarker is the length of the shortest errorMarkers entry.
const minMarker = len("FAILED")

// nextMarker returns the index of the first occurrence of any errorMarkers
// entry in s at or after from, len(s) if there is none.
func nextMarker(s string, from int) int {
	for i := from; i+minMarker <= len(s); i++ {
		b := markerFirst[s[i]]
		if b == 0 {
			continue
		}
		for b &= markerSecond[s[i+1]]; b != 0; b &= b - 1 {
			if strings.HasPrefix(s[i:], errorMarkers[bits.TrailingZeros32(b)].sub) {
				return i
			}
		}
	}
	return len(s)
}

func hasPrefixFold(s, p string) bool { return len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) }

// lastOutputLine is the last non-empty line, ignoring the mini-swe-agent
// wrapper tags: a failing script's last words usually say why.
func lastOutputLine(s string) string {
	for rest := s; rest != ""; {
		i := strings.LastIndexByte(rest, '\n')
		line := strings.TrimSpace(rest[i+1:])
		if i < 0 {
			rest = ""
		} else {
			rest = rest[:i]
		}
		if line == "" || line == "</output>" || line == "<output>" || strings.HasPrefix(line, "<returncode>") {
			continue
		}
		return line
	}
	return ""
}

// appendErrorSig writes the normalised error message: volatile parts
// replaced as in results, then paths and digit runs (line numbers, counts)
// removed, so the same failure at another line or in another temp file has
// one signature. tmp is scratch space; the grown scratch is returned.
func appendErrorSig(dst, tmp []byte, line string) ([]byte, []byte) {
	tmp = appendNormalized(tmp[:0], line)
	start := len(dst)
	for i := 0; i < len(tmp); {
		c := tmp[i]
		if isDigit(c) {
			j := i
			for j < len(tmp) && isDigit(tmp[j]) {
				j++
			}
			if i > 0 && isIdentByte(tmp[i-1]) {
				// Digits inside a name (TestHandle2, test_v3) tell failures
				// apart; only free-standing numbers are line numbers and counts.
				dst = append(dst, tmp[i:j]...)
			} else {
				dst = append(dst, '#')
			}
			i = j
			continue
		}
		if c == '/' || (c == '.' && i+1 < len(tmp) && tmp[i+1] == '/') {
			// A path runs to the next blank or quote; back up over the
			// word before the slash that belongs to it. The directories
			// go, the file name stays: "no such file: a.txt" and "...:
			// b.txt" are different failures wherever they happened.
			for len(dst) > start && !isPathStop(dst[len(dst)-1]) {
				dst = dst[:len(dst)-1]
			}
			j := i
			for j < len(tmp) && !isPathStop(tmp[j]) {
				j++
			}
			base := tmp[i:j]
			if k := bytes.LastIndexByte(base, '/'); k >= 0 {
				base = base[k+1:]
			}
			dst = append(dst, "<path>/"...)
			for _, b := range base {
				if isDigit(b) {
					if n := len(dst); n == 0 || dst[n-1] != '#' {
						dst = append(dst, '#')
					}
					continue
				}
				dst = append(dst, b)
			}
			i = j
			continue
		}
		dst = append(dst, c)
		i++
	}
	return dst, tmp
}

func isIdentByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isPathStop(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '"' || c == '\'' || c == ',' || c == '(' || c == ')' || c == '`' || c == ':'
}
