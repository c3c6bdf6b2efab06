package inspect

import (
	"path"
	"slices"
	"strings"
)

// restore is a command putting a file, or the whole work tree (path "."),
// back to an earlier state: `git checkout FILE`, `git restore FILE`, `git
// stash`, `git reset --hard`, `cp FILE.bak FILE`, `mv backup/FILE FILE`,
// or str_replace_editor's undo_edit.
type restore struct {
	path string
	// from names the state restored: a git revision ("HEAD" unless given)
	// or the backup file. `git checkout f` and `git restore f` both give
	// f its HEAD state: the same return, whatever the means.
	from string
}

// restoreHint is a cheap test that a command may restore something.
func restoreHint(cmd string) bool {
	return strings.Contains(cmd, "git") || strings.Contains(cmd, "cp ") || strings.Contains(cmd, "mv ") || strings.HasPrefix(cmd, "undo_edit ")
}

// appendRestores appends the restores the shell command line cmd
// performs, and reports whether the command goes on to change something
// after its last restore (cp f.bak f && sed -i ... f): an attempt.
func appendRestores(dst []restore, cmd string) ([]restore, bool) {
	after := false
	n := len(dst)
	for cmd != "" {
		var seg string
		seg, cmd = cutAny(cmd, ";&|\n")
		w := strings.Fields(seg)
		k := len(dst)
		dst = appendSegmentRestores(dst, w)
		switch {
		case len(dst) > k:
			after = false
		case len(dst) > n && len(w) > 0 && !readOnlyWords(w):
			after = true
		}
	}
	return dst, after
}

// appendSegmentRestores reads one simple command (its words).
func appendSegmentRestores(dst []restore, w []string) []restore {
	for len(w) > 0 && (strings.Contains(w[0], "=") || w[0] == "sudo" || w[0] == "command") {
		w = w[1:] // VAR=value prefixes
	}
	// Redirections (2>/dev/null, > out.txt) are no arguments.
	args := w[:0:0]
	for i := 0; i < len(w); i++ {
		switch {
		case w[i] == ">" || w[i] == ">>" || w[i] == "<" || w[i] == "2>":
			i++
		case !strings.ContainsAny(w[i], "<>"):
			args = append(args, w[i])
		}
	}
	w = args
	if len(w) < 2 {
		return dst
	}
	switch w[0] {
	case "undo_edit": // str_replace_editor's undo: the file before its last edit
		return append(dst, restore{path: cleanPath(w[1]), from: "undo"})
	case "git":
		w = w[1:]
		for len(w) > 1 && (w[0] == "-C" || w[0] == "-c") {
			w = w[2:]
		}
		if len(w) == 0 {
			return dst
		}
		return appendGitRestores(dst, w[0], w[1:])
	case "cp", "mv":
		var files []string
		for _, a := range w[1:] {
			if !strings.HasPrefix(a, "-") {
				files = append(files, strings.Trim(a, `'"`))
			}
		}
		if len(files) == 2 && backupOf(files[0], files[1]) {
			return append(dst, restore{path: cleanPath(files[1]), from: path.Clean(files[0])})
		}
	}
	return dst
}

func appendGitRestores(dst []restore, sub string, args []string) []restore {
	from := "HEAD"
	var files []string
	dashes := false
	switch sub {
	case "checkout", "restore":
		staged, worktree := false, false
		for i := 0; i < len(args); i++ {
			a := strings.Trim(args[i], `'"`)
			switch {
			case dashes:
				files = append(files, a)
			case a == "--":
				dashes = true
				if sub == "checkout" && len(files) == 1 {
					from = files[0] // git checkout REV -- FILE...
				}
				files = files[:0]
			case a == "-b" || a == "-B" || a == "--orphan" || a == "-p" || a == "--patch":
				return dst // a new branch, or a hunk-by-hunk choice
			case a == "--staged" || a == "-S":
				staged = true
			case a == "--worktree" || a == "-W":
				worktree = true
			case strings.HasPrefix(a, "--source="):
				from = strings.TrimPrefix(a, "--source=")
			case a == "-s" || a == "--source":
				if i+1 < len(args) {
					i++
					from = args[i]
				}
			case strings.HasPrefix(a, "-"):
			default:
				files = append(files, a)
			}
		}
		if staged && !worktree {
			return dst // only the index changes
		}
		if sub == "checkout" && !dashes && len(files) > 0 && !pathLike(files[0]) {
			if len(files) == 1 {
				return dst // `git checkout main`: a branch switch
			}
			from, files = files[0], files[1:] // git checkout REV FILE...
		}
		for _, f := range files {
			if dashes || sub == "restore" || pathLike(f) {
				dst = append(dst, restore{path: cleanPath(f), from: from})
			}
		}
	case "stash":
		if len(args) == 0 {
			return append(dst, restore{path: ".", from: from})
		}
		switch args[0] {
		case "push", "save", "-u", "--include-untracked", "-k", "--keep-index", "-a", "--all", "-q", "--quiet":
			return append(dst, restore{path: ".", from: from})
		}
	case "reset":
		hard := false
		for _, a := range args {
			switch {
			case a == "--hard":
				hard = true
			case !strings.HasPrefix(a, "-"):
				from = a
			}
		}
		if hard {
			return append(dst, restore{path: ".", from: from})
		}
	}
	return dst
}

// pathLike reports an argument of `git checkout` that names files rather
// than a branch or a revision: ".", a glob, a directory ("src/") or a name
// with a file extension (a branch "release/1.2" has none).
func pathLike(a string) bool {
	if a == "." || strings.Contains(a, "*") || strings.HasSuffix(a, "/") {
		return true
	}
	ext := path.Ext(a)
	if len(ext) < 2 || len(ext) > 6 {
		return false
	}
	for i := 1; i < len(ext); i++ {
		if c := ext[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// cleanPath names a restored file by its last two path elements, so that
// /testbed/pkg/a.py, pkg/a.py and ./pkg/a.py, spelt differently from one
// command to the next, are one file.
func cleanPath(p string) string {
	p = path.Clean(p)
	if p == "." || p == "/" {
		return "."
	}
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		if j := strings.LastIndexByte(p[:i], '/'); j >= 0 {
			return p[j+1:]
		}
	}
	return p
}

// backupMarkers in a file's name or directory mark a copy kept to go back
// to.
var backupMarkers = [...]string{"bak", "backup", "orig", "save", "old", "copy", "bk", "~", "clean", "pristine"}

// backupOf reports whether file b looks like a backup of file f: its name
// holds f's (f.py.bak, f.py.orig, f_backup.py, original_f.py,
// backup/f.py, /tmp/f.py) and a backup marker, or it sits in /tmp.
func backupOf(b, f string) bool {
	if b == f {
		return false
	}
	bb, bf := path.Base(b), path.Base(f)
	stem := strings.TrimSuffix(bf, path.Ext(bf))
	if stem == "" || !strings.Contains(bb, stem) {
		return false
	}
	lower := strings.ToLower(b)
	if strings.HasPrefix(lower, "/tmp/") {
		return true
	}
	// The marker is in b's name beside f's, or names b's folder.
	rest := strings.Replace(strings.ToLower(bb), strings.ToLower(stem), "", 1) + "/" + path.Base(path.Dir(lower))
	for _, m := range backupMarkers {
		if strings.Contains(rest, m) {
			return true
		}
	}
	return false
}

// readOnly reports a call that looks at the workspace without changing
// it: a read, view, search or listing tool, or a shell command that only
// prints (cat, grep, ls, git status/diff/log). Between two restores such
// calls are no attempt.
func readOnly(c *Call) bool {
	p := c.Primary
	if strings.HasPrefix(p, "view ") || strings.HasPrefix(p, "read ") {
		return true
	}
	name := c.Name
	if !isASCII(name) {
		name = strings.ToLower(name) // an ASCII name is lowered as it is compared
	}
	for _, w := range [...]string{"read", "view", "search", "grep", "glob", "find", "list", "open", "goto", "scroll", "fetch"} {
		if containsLower(name, w) {
			return true
		}
	}
	return readOnlyCommand(p)
}

// containsLower reports strings.Contains(strings.ToLower(s), sub) for s
// ASCII or lowered already, and sub lower-case ASCII: no lowered copy.
func containsLower(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for j < len(sub) && lowerASCII(s[i+j]) == sub[j] {
			j++
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}

// quietRedirects send output nowhere: they write no file.
var quietRedirects = strings.NewReplacer("2>&1", "", "2>/dev/null", "", ">/dev/null", "", "&>/dev/null", "")

// readOnlyCommand reports a shell command line every part of which only
// prints ("cd /testbed && grep -n x f.py | head").
func readOnlyCommand(p string) bool {
	if strings.IndexByte(p, '>') >= 0 {
		if p = quietRedirects.Replace(p); strings.IndexByte(p, '>') >= 0 {
			return false // writes a file
		}
	}
	any := false
	for p != "" {
		var seg string
		seg, p = cutAny(p, ";&|\n")
		var buf [16]string
		if w := fields(buf[:0], seg); len(w) > 0 {
			if !readOnlyWords(w) {
				return false
			}
			any = true
		}
	}
	return any
}

// fields appends the words of s (strings.Fields) to buf.
func fields(buf []string, s string) []string {
	if !isASCII(s) {
		return append(buf, strings.Fields(s)...) // Unicode spaces
	}
	for i := 0; i < len(s); {
		for i < len(s) && asciiSpace[s[i]] {
			i++
		}
		j := i
		for j < len(s) && !asciiSpace[s[j]] {
			j++
		}
		if j > i {
			buf = append(buf, s[i:j])
		}
		i = j
	}
	return buf
}

// readOnlyWords reports a simple command (its words) that only prints.
func readOnlyWords(w []string) bool {
	sub := ""
	if len(w) > 1 {
		sub = w[1]
	}
	switch w[0] {
	case "cd", "true", ":", "cat", "head", "tail", "less", "more", "ls", "grep", "rg", "pwd", "wc", "nl", "tree", "which", "echo", "file", "stat",
		"journalctl", "ps", "df", "du", "free", "uptime", "date", "top", "sort", "uniq", "cut", "awk":
		return true
	case "find":
		return !slices.Contains(w, "-exec") && !slices.Contains(w, "-delete")
	case "git":
		return sub == "status" || sub == "diff" || sub == "log" || sub == "show" || sub == "blame"
	case "docker", "kubectl", "podman":
		return sub == "logs" || sub == "ps" || sub == "get" || sub == "describe" || sub == "inspect" || sub == "top"
	case "sed":
		return sub == "-n"
	}
	return false
}

// stateReturns finds the work tree going back to one state again and
// again by restore commands, with attempts in between: the state
// oscillation edit_undo's swapped edits cannot see when the attempts are
// edit scripts and the way back is `git checkout FILE` or a backup copy.
// It returns the restores of the most returned-to state (each after an
// attempt since the last restore of its file), whether every attempt
// ended in a failure or in one same result, and whether every round after
// the first re-applied a change an earlier round made (the same call
// again after the restore): the agent replays what it already knows
// fails, where a healthy run that restores tries something else.
//
// failing is true when the state is one file's and every round before a
// return ended with its last run (a test, a reproduction script: a call
// that neither looks nor changes) failing: real SWE-bench runs that loop
// try a different change each round, run the failing test again and put
// the file back, three times and more.
func (in *inspection) stateReturns() (idx []int, noProgress, replayed, failing bool) {
	evs := in.evs
	type state struct {
		restore
		n       int      // returns counted
		idx     []int    // the restores counted
		attempt bool     // an attempt since the last restore of the path
		ends    []int    // the last call with a result before each return
		round   []uint64 // the attempts' fingerprints since the last restore of the path
		seen    []uint64 // those of the rounds before it
		replays int      // rounds that re-applied an earlier round's change
		run     int8     // the round's last run: 0 none, 1 failed, 2 passed
		failed  int      // rounds whose last run failed
	}
	var states []state
	var rs []restore
	// Most histories restore nothing: find out before classifying calls.
	if !slices.ContainsFunc(evs, func(x ev) bool { return x.c.facts()&primaryRestores != 0 }) {
		return nil, false, false, false
	}
	runOf := func(x *ev) int8 {
		if !x.has || changes(x.c, ".") {
			return 0
		}
		if x.isErr {
			return 1
		}
		return 2
	}
	attempt, lastEnd := false, -1
	var since []int // the attempts since the latest restore of anything
	for a := range evs {
		x := &evs[a]
		rs = rs[:0]
		after := false
		if x.c.facts()&primaryRestores != 0 {
			rs, after = appendRestores(rs, x.c.Primary)
		}
		tried := func() {
			attempt = true
			since = append(since, a)
			run := runOf(x)
			for i := range states {
				states[i].attempt = true
				if changes(x.c, states[i].path) {
					states[i].round = append(states[i].round, x.fp)
				}
				if run != 0 {
					states[i].run = run
				}
			}
			if x.has {
				lastEnd = a
			}
		}
		if len(rs) == 0 {
			if !x.c.onlyLooks() {
				tried()
			} else if x.has {
				lastEnd = a
			}
			continue
		}
		for _, r := range rs {
			k := -1
			for i := range states {
				if states[i].restore == r {
					k = i
					break
				}
			}
			if k < 0 {
				states = append(states, state{restore: r, attempt: attempt})
				for _, b := range since {
					if changes(evs[b].c, r.path) {
						states[len(states)-1].round = append(states[len(states)-1].round, evs[b].fp)
					}
					if run := runOf(&evs[b]); run != 0 {
						states[len(states)-1].run = run
					}
				}
				k = len(states) - 1
			}
			s := &states[k]
			if s.attempt {
				s.n++
				s.idx = append(s.idx, a)
				s.ends = append(s.ends, lastEnd)
				if slices.ContainsFunc(s.round, func(fp uint64) bool { return slices.Contains(s.seen, fp) }) {
					s.replays++
				}
				if s.run == 1 {
					s.failed++
				}
				s.seen = append(s.seen, s.round...)
			}
			// The file (every file, for ".") is back: later restores of it
			// count only after a new attempt.
			for i := range states {
				if p := states[i].path; p == r.path || r.path == "." || p == "." {
					states[i].attempt = false
					states[i].round = states[i].round[:0]
					states[i].run = 0
				}
			}
		}
		since = since[:0]
		if after {
			tried() // cp f.bak f && sed -i ... f: a new attempt from the restored state
		}
	}
	best := -1
	for i := range states {
		if states[i].n > 0 && (best < 0 || states[i].n > states[best].n) {
			best = i
		}
	}
	if best < 0 {
		return nil, false, false, false
	}
	s := &states[best]
	replayed = s.n > 1 && s.replays == s.n-1
	failing = s.path != "." && s.failed == s.n
	noProgress = true
	var ref *ev
	allErr := true
	for _, e := range s.ends {
		if e < 0 {
			return s.idx, false, replayed, failing
		}
		x := &evs[e]
		allErr = allErr && x.isErr
		if ref == nil {
			ref = x
		} else if !sameOutcome(ref, x) {
			noProgress = false
		}
	}
	return s.idx, noProgress || allErr, replayed, failing
}

// changes reports whether attempt c names the file p changes (any file,
// for the work tree "."): the change a round makes, not the run that
// checks it.
func changes(c *Call, p string) bool {
	if p == "." {
		if c.facts()&(argsPatch|argsReplace|argsWrite) != 0 || editCall(c) {
			return true
		}
		cmd := c.Primary
		return strings.Contains(cmd, "sed -i") || strings.Contains(cmd, "perl -i") || strings.Contains(cmd, "> ") ||
			strings.Contains(cmd, "tee ") || strings.HasPrefix(cmd, "patch ") || strings.Contains(cmd, "git apply")
	}
	return strings.Contains(c.Args, path.Base(p))
}

// targetHash hashes the files a primary argument names: the path itself,
// or the words of a command that look like paths (a '/' or a file
// extension). 0 when it names none. `pytest tests/a.py` and `pytest
// tests/b.py` have different targets; `grep -rn foo src/` and `grep -rn
// fo0 src/` the same.
func targetHash(p string) uint64 {
	h, any := newFNV(), false
	for i := 0; i < len(p); {
		j := i
		for j < len(p) && p[j] != ' ' && p[j] != '\t' && p[j] != '\n' {
			j++
		}
		w := p[i:j]
		i = j + 1
		// Quoted words are patterns and scripts (sed 's/a/b/'), not files.
		if w == "" || w[0] == '-' || w[0] == '\'' || w[0] == '"' || hasShellMeta(w) {
			continue
		}
		if strings.IndexByte(w, '/') >= 0 || pathLike(w) {
			h = h.str(w).byte(0)
			any = true
		}
	}
	if !any {
		return 0
	}
	return uint64(h)
}

// shellMeta marks the bytes of shell syntax: a word holding one is no
// file name.
var shellMeta = func() (t [256]bool) {
	for _, c := range []byte("<>=$|;&(){}") {
		t[c] = true
	}
	return t
}()

// hasShellMeta is strings.ContainsAny(w, "<>=$|;&(){}"), without making
// the set of them each time.
func hasShellMeta(w string) bool {
	for i := 0; i < len(w); i++ {
		if shellMeta[w[i]] {
			return true
		}
	}
	return false
}

// cutAny splits s at its first byte in seps: what comes before, and what
// comes after ("" when no byte of seps occurs).
func cutAny(s, seps string) (string, string) {
	if i := strings.IndexAny(s, seps); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}
