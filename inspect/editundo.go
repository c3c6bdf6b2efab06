package inspect

import (
	"slices"
	"strings"
	"sync"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/tidwall/gjson"
)

// edit_undo: edits that swap back an earlier edit.

// editPairs are the (old, new) argument names of replace-style edit tools.
var editPairs = [...][2]string{
	{"old_str", "new_str"}, {"old_string", "new_string"}, {"oldText", "newText"}, {"old_text", "new_text"},
	{"search", "replace"}, {"old", "new"}, {"find", "replace"},
}

var pathKeys = [...]string{"path", "file_path", "filePath", "target_file", "filename", "file", "absolute_path"}
var contentKeys = [...]string{"content", "file_text", "contents", "text", "code"}

// editFields holds the raw values of the argument names editUndo reads
// in one arguments object, read in one pass: the first member of each
// name, as gjson.Get (which this replaced) finds it. vals holds them in
// the order of pathKeys, editPairs and contentKeys.
type editFields struct {
	vals [contentSlots + len(contentKeys)]string
}

// Where each list's names begin in editFields.vals.
const (
	pairSlots    = len(pathKeys)
	contentSlots = pairSlots + 2*len(editPairs)
)

// editSlots maps each argument name editUndo reads to its places in
// editFields.vals ("replace" is in two pairs).
var editSlots = func() map[string][]int {
	m := map[string][]int{}
	for i, k := range pathKeys {
		m[k] = append(m[k], i)
	}
	for i, kp := range editPairs {
		m[kp[0]] = append(m[kp[0]], pairSlots+2*i)
		m[kp[1]] = append(m[kp[1]], pairSlots+2*i+1)
	}
	for i, k := range contentKeys {
		m[k] = append(m[k], contentSlots+i)
	}
	return m
}()

func (f *editFields) read(args string) {
	eachMember(args, func(k, v string) bool {
		for _, i := range editSlots[jsonString(k)] {
			if f.vals[i] == "" {
				f.vals[i] = v
			}
		}
		return true
	})
}

// jsonString returns the value of a raw JSON string: a view when it has
// no escapes, else unescaped as gjson does it (a rare case).
func jsonString(raw string) string {
	if len(raw) < 2 {
		return ""
	}
	if body := raw[1 : len(raw)-1]; strings.IndexByte(body, '\\') < 0 {
		return body
	}
	return gjson.Parse(raw).Str
}

// hashJSONString hashes the value of a raw JSON string, unescaped.
// Escapes other than \u decode the same in AppendUnescaped and gjson; \u
// escapes (lone surrogates differ) go to gjson.
func hashJSONString(raw string) uint64 {
	body := raw[1 : len(raw)-1]
	if strings.IndexByte(body, '\\') < 0 {
		return hashString(body)
	}
	if strings.Contains(body, `\u`) {
		return hashString(gjson.Parse(raw).Str)
	}
	buf := unescapeBufs.Get().(*[]byte)
	*buf = rawjson.AppendUnescaped((*buf)[:0], body)
	h := uint64(newFNV().bytes(*buf))
	if cap(*buf) <= maxPooledScratch {
		unescapeBufs.Put(buf)
	}
	return h
}

// unescapeBufs hold the unescaped texts hashJSONString hashes.
var unescapeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

type edit struct {
	a        int // event index
	path     string
	old, new uint64 // for replace edits
	content  uint64 // for whole-file writes
}

// editUndo: an edit that swaps back an earlier edit of the same file (old
// and new exchanged), or a file's written content going back to an
// earlier version. One revert is common (removing a debug print) and only
// reported; the change applied again after its revert is a loop.
func (in *inspection) editUndo() (Detection, bool) {
	evs := in.evs
	var edits []edit
	open := "" // the file SWE-agent's editor has open: its edit names none
	for a := range evs {
		x := &evs[a]
		f := x.c.known()
		if x.isErr || f.bits&argsQuoted == 0 {
			continue
		}
		if x.c.Name == "open" && x.c.Primary != "" {
			open = x.c.Primary
			continue
		}
		if f.bits&argsPatch != 0 {
			edits = appendPatchEdits(edits, a, x.c)
			continue
		}
		if f.bits&(argsReplace|argsWrite) == 0 {
			continue
		}
		e := edit{a: a, path: open}
		if f.bits&argsNamesPath != 0 {
			e.path = f.edit.path
		}
		if e.path == "" {
			continue
		}
		if f.bits&argsReplace != 0 {
			e.old, e.new = f.edit.old, f.edit.new
		} else {
			e.content = f.edit.new
		}
		edits = append(edits, e)
	}
	// Count reverts per file: each edit that swaps back an earlier edit of
	// its file counts once, so A->B, B->A, A->B is two reverts (the revert
	// repeated), however many times each direction occurred before.
	bestPath, best, bestIdx := "", 0, []int(nil)
	swaps := map[string]int{}
	swapIdx := map[string][]int{}
	for j := range edits {
		ej := &edits[j]
		reverts := 0
		var idx []int
		for i := j - 1; i >= 0 && ej.old != 0; i-- {
			ei := &edits[i]
			if ei.path == ej.path && ej.old == ei.new && ej.new == ei.old {
				swaps[ej.path]++
				swapIdx[ej.path] = append(swapIdx[ej.path], ei.a, ej.a)
				reverts = swaps[ej.path]
				idx = append(idx, swapIdx[ej.path]...)
				break
			}
		}
		if ej.content != 0 {
			// content history of this file up to j: A,B,A counts each return
			var seen []uint64
			for i := 0; i <= j; i++ {
				ei := &edits[i]
				if ei.path != ej.path || ei.content == 0 {
					continue
				}
				if n := len(seen); n > 0 && seen[n-1] != ei.content && slices.Contains(seen[:n-1], ei.content) {
					reverts++
				}
				seen = append(seen, ei.content)
				idx = append(idx, ei.a)
			}
		}
		if reverts > best {
			idx = append(idx, ej.a)
			slices.Sort(idx)
			best, bestPath, bestIdx = reverts, ej.path, slices.Compact(idx)
		}
	}
	var d Detection
	thr := in.lim.EditUndoCount
	if best >= thr {
		d.Evidence = in.evidence(bestIdx)
		if best > thr {
			d.Score = grow(0.93, strongStep, best, thr+1, 1)
			d.Evidence.NoProgress = true
		} else {
			d.Score = 0.5
		}
		d.Evidence.Count, d.Evidence.Threshold = best, thr
		d.Evidence.Element = evs[bestIdx[len(bestIdx)-1]].c.Name + "(" + shorten(bestPath, 40) + ") reverted"
	}
	idx, noProgress, replayed, failing := in.stateReturns()
	returns := in.lim.StateReturns
	if replayed && noProgress || failing {
		// Each round after the first re-applied an earlier round's change
		// and failed alike, or each round of changes to one file ended in
		// a failing run before the file was put back: real failing runs
		// restore three times, healthy ones up to four, trying something
		// new each time and getting somewhere.
		returns = min(returns, replayedReturns)
		noProgress = noProgress || failing
	}
	if len(idx) >= returns {
		// Returning to one state again and again is a loop whatever the
		// attempts were; attempts that all failed alike make it certain.
		r := Detection{Score: 0.8, Evidence: in.evidence(idx)}
		if noProgress {
			r.Score = grow(0.93, strongStep, len(idx), returns, 1)
		}
		r.Evidence.Threshold, r.Evidence.NoProgress = returns, noProgress
		r.Evidence.Element += " restored"
		withOutcome(&r.Evidence, evs[idx[len(idx)-1]].c)
		if r.Score > d.Score {
			d = r
		}
	}
	return d, d.Score > 0
}

// replayedReturns is how many returns to one state make a loop when every
// round re-applied an earlier change and failed alike, or every round's
// run failed before one file was put back.
const replayedReturns = 3

// patchFile starts a file's section in an apply_patch patch (Codex).
const patchFile = "*** Update File: "

// appendPatchEdits reads the files an apply_patch call changes as
// replace edits: the removed lines are old, the added lines new, so a
// patch that puts back what an earlier one took out is a revert.
func appendPatchEdits(dst []edit, a int, c *Call) []edit {
	patch := gjson.Get(c.Args, "input").Str
	if patch == "" {
		patch = c.Primary // ["apply_patch", "*** Begin Patch ..."]
	}
	var e *edit
	var removed, added fnv
	flush := func() {
		if e != nil {
			e.old, e.new = uint64(removed)|1, uint64(added)|1
		}
		e = nil
	}
	for _, line := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(line, patchFile):
			flush()
			dst = append(dst, edit{a: a, path: strings.TrimSpace(line[len(patchFile):])})
			e, removed, added = &dst[len(dst)-1], newFNV(), newFNV()
		case strings.HasPrefix(line, "*** "):
			flush()
		case e == nil:
		case strings.HasPrefix(line, "-"):
			removed = removed.str(line[1:]).byte('\n')
		case strings.HasPrefix(line, "+"):
			added = added.str(line[1:]).byte('\n')
		}
	}
	flush()
	return dst
}
