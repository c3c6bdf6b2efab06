package inspect

import (
	"github.com/loopguard/loopguard/internal/rawjson"
	"slices"
	"strings"
	"unsafe"
)

// FNV-1a 64: stable across processes and replicas (PatternKey and the
// session store's fingerprints are compared between them), unlike maphash.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

type fnv uint64

func newFNV() fnv { return fnvOffset }

func (h fnv) str(s string) fnv {
	for i := 0; i < len(s); i++ {
		h ^= fnv(s[i])
		h *= fnvPrime
	}
	return h
}

func (h fnv) bytes(b []byte) fnv {
	for _, c := range b {
		h ^= fnv(c)
		h *= fnvPrime
	}
	return h
}

func (h fnv) byte(c byte) fnv {
	h ^= fnv(c)
	h *= fnvPrime
	return h
}

func hashString(s string) uint64 { return uint64(newFNV().str(s)) }

// arena hands out immutable strings carved from large byte chunks, so a
// Trajectory costs a handful of allocations instead of one per string.
// Bytes already handed out are never written again; a full chunk is left
// alone (strings still point into it) and a new one started.
type arena struct {
	buf []byte
	// held is the capacity of every chunk started, what the strings handed
	// out may keep alive (a SessionCache's memory accounting).
	held int
	// chunk is the least size of a new chunk; 0 means arenaChunk.
	chunk int
}

func newArena(size int) arena {
	if size < 4096 {
		size = 4096
	}
	return arena{buf: make([]byte, 0, size), held: size}
}

// arenaChunk is the size of the chunks an arena grows by.
const arenaChunk = 64 << 10

// reserve makes room for n more bytes without moving what was handed out.
func (a *arena) reserve(n int) {
	if cap(a.buf)-len(a.buf) >= n {
		return
	}
	size := a.chunk
	if size == 0 {
		size = arenaChunk
	}
	if n > size {
		size = n
	}
	a.buf = make([]byte, 0, size)
	a.held += size
}

// mark returns the current end, to be passed to since after appending.
func (a *arena) mark() int { return len(a.buf) }

// since returns the bytes appended after mark as a string.
func (a *arena) since(m int) string {
	if len(a.buf) == m {
		return ""
	}
	b := a.buf[m:]
	return unsafe.String(&b[0], len(b))
}

// copy stores s in the arena.
func (a *arena) copy(s string) string {
	if s == "" {
		return ""
	}
	a.reserve(len(s))
	m := a.mark()
	a.buf = append(a.buf, s...)
	return a.since(m)
}

// kv is one member of an object being canonicalised.
type kv struct{ key, raw string }

// canonScratch is reused between calls (pooled with the parser state).
type canonScratch struct{ stack [][]kv }

// appendCanonical writes the raw JSON value v compactly with object keys
// sorted, leaving out the top-level keys in skip. Strings and numbers keep
// their original spelling: re-encoding them would cost time and buys
// nothing for equality.
func (cs *canonScratch) appendCanonical(dst []byte, v string, depth int, skip []string) []byte {
	switch rawKind(v) {
	case '{':
		return cs.appendObject(dst, v, depth, skip)
	case '[':
		return cs.appendArray(dst, v, depth)
	default:
		return append(dst, strings.TrimSpace(v)...)
	}
}

// appendObject is appendCanonical for an object, appendArray for an
// array. Each kind has a function of its own, and an array's elements are
// walked without a callback, so that a level of nesting costs the stack
// only its own kind's frame: a call's arguments are keyed on the stack of
// the relay that inspects its stream (docs/streams.md).
func (cs *canonScratch) appendObject(dst []byte, v string, depth int, skip []string) []byte {
	members := cs.sortedMembers(v, depth, skip)
	dst = append(dst, '{')
	for i := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		m := cs.stack[depth][i] // a nested object may reuse deeper levels only
		dst = append(dst, m.key...)
		dst = append(dst, ':')
		dst = cs.appendCanonical(dst, m.raw, depth+1, nil)
	}
	return append(dst, '}')
}

// sortedMembers gathers the members of the object v, sorted by key, into
// cs.stack[depth], and returns them.
func (cs *canonScratch) sortedMembers(v string, depth int, skip []string) []kv {
	// Arrays take no level of their own, so an object in an array in an
	// object is two levels down: grow to depth, not by one.
	for depth >= len(cs.stack) {
		cs.stack = append(cs.stack, make([]kv, 0, 8))
	}
	members := cs.stack[depth][:0]
	eachMember(v, func(k, val string) bool {
		if depth == 0 && len(skip) > 0 && len(k) >= 2 && slices.Contains(skip, k[1:len(k)-1]) {
			return true
		}
		members = append(members, kv{k, val})
		return true
	})
	slices.SortFunc(members, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	cs.stack[depth] = members
	return members
}

func (cs *canonScratch) appendArray(dst []byte, arr string, depth int) []byte {
	dst = append(dst, '[')
	first := true
	for i := 1; ; { // as elementsFrom walks: arr[0] is the '['
		i = rawjson.SkipSpace(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			break
		}
		if arr[i] == ',' {
			i++
			continue
		}
		ve := rawjson.ValueEnd(arr, i)
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = cs.appendCanonical(dst, arr[i:ve], depth+1, nil)
		i = ve
	}
	return append(dst, ']')
}

// primaryKeys are the argument keys that name what a call acts on, most
// telling first.
var primaryKeys = []string{
	"command", "cmd", "path", "file_path", "filePath", "filepath", "absolute_path", "filename", "file",
	"target_file", "target", "notebook_path", "pattern", "query", "regex", "url", "uri", "code", "script",
	"dir_path", "directory", "dir", "name", "id",
}

// primaryArg finds the primary argument of a raw arguments object and
// returns its key and raw value (a string or an array).
func primaryArg(args string) (string, string) {
	if rawKind(args) != '{' {
		return "", ""
	}
	best, bestKey, bestVal := len(primaryKeys), "", ""
	eachMember(args, func(k, v string) bool {
		if kind := rawKind(v); kind != '"' && kind != '[' || len(k) < 2 {
			return true
		}
		name := k[1 : len(k)-1]
		if i := slices.Index(primaryKeys[:best], name); i >= 0 {
			best, bestKey, bestVal = i, name, v
		}
		return best > 0
	})
	return bestKey, bestVal
}

// shellReaders print a file, so `cat f`, `head -n 50 f` and `tail f` all
// read f.
var shellReaders = map[string]bool{"cat": true, "head": true, "tail": true, "less": true, "more": true, "bat": true, "nl": true}

// normalizeShell returns `read FILE` for a simple paging command of one
// file, and the command with whitespace collapsed otherwise. Pipelines,
// redirections and command lists keep their full text: `cat f | grep x`
// is a different question from `cat f`.
func normalizeShell(cmd string) string {
	cmd = strings.TrimSpace(cmd)
	if strings.ContainsAny(cmd, "|><;&`$(\n") {
		return collapseSpace(cmd)
	}
	first, _, _ := strings.Cut(cmd, " ")
	if !shellReaders[first] {
		return collapseSpace(cmd) // the common case: no allocation
	}
	f := strings.Fields(cmd)
	if len(f) < 2 {
		return collapseSpace(cmd)
	}
	var file string
	for i := 1; i < len(f); i++ {
		a := f[i]
		switch {
		case a == "-n" || a == "-c" || a == "--lines" || a == "--bytes":
			i++ // the flag's value
		case strings.HasPrefix(a, "-"):
		default:
			if file != "" {
				return collapseSpace(cmd) // several files: not one read
			}
			file = a
		}
	}
	if file == "" {
		return collapseSpace(cmd)
	}
	return "read " + strings.Trim(file, `'"`)
}

func collapseSpace(s string) string {
	if !strings.Contains(s, "  ") && !strings.ContainsAny(s, "\t\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// isShellTool reports tools whose primary argument is a shell command.
func isShellKey(key string) bool { return key == "command" || key == "cmd" || key == "script" }
