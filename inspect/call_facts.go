package inspect

import (
	"strings"

	"github.com/loopguard/loopguard/internal/rawjson"
)

// Facts of a call (its name and arguments) that rules ask of every call
// they read, on every request: computed once, with the arguments
// (parser.setArgs), so that a long cached session does not parse or
// search each call's text again each turn. A Call built otherwise has
// none, and they are computed on use.
const (
	factsKnown      uint8 = 1 << iota
	argsQuoted            // Args holds a '"' (editUndo reads no other)
	argsPatch             // Args holds an apply_patch file header (patchFile)
	primaryRestores       // Primary restores a file (appendRestores finds one)
	argsReplace           // Args is a replace edit: editFacts.old and new hash its texts
	argsWrite             // Args is a whole-file write: editFacts.new hashes its content
	argsNamesPath         // an edit's Args name its path: editFacts.path
	callReadOnly          // the call only looks (readOnly)
)

// callFacts holds the facts of a call: the bits above, and what
// editUndo and the rules comparing targets read of every call in their
// reach. It is
// kept small, in every cached call: hashes, and for an edit a pointer to
// its hashes and a view of its path in Args (a path with escapes is
// copied, the rare exception).
type callFacts struct {
	// target is targetHash(Primary): the files the call names.
	target uint64
	// edit is the edit the arguments make (argsReplace, argsWrite), nil
	// when none.
	edit *editFacts
	bits uint8
}

// editFacts is what editUndo reads of an edit's arguments.
type editFacts struct {
	// old and new hash (|1) a replace edit's old and new text; new alone
	// the content of a whole-file write.
	old, new uint64
	// path is the path the arguments name (see argsNamesPath; when they
	// name none, the edit is of the file SWE-agent's editor has open).
	path string
}

func argFactsOf(c *Call) callFacts {
	f := callFacts{bits: factsKnown, target: targetHash(c.Primary)}
	if strings.IndexByte(c.Args, '"') >= 0 {
		f.bits |= argsQuoted
	}
	if strings.Contains(c.Args, patchFile) {
		f.bits |= argsPatch
	}
	if c.Primary != "" && restoreHint(c.Primary) {
		if rs, _ := appendRestores(nil, c.Primary); len(rs) > 0 {
			f.bits |= primaryRestores
		}
	}
	if readOnly(c) {
		f.bits |= callReadOnly
	}
	if f.bits&(argsQuoted|argsPatch) == argsQuoted {
		editFactsOf(&f, c.Args)
	}
	return f
}

// editFactsOf reads the edit that arguments make, if any: a path (the
// first pathKeys name holding a string), and the first editPairs pair
// whose both texts are strings or, failing one, the first contentKeys
// text.
func editFactsOf(f *callFacts, args string) {
	if rawKind(args) != '{' || !rawjson.Valid(rawjson.Bytes(args)) {
		return
	}
	var e editFields
	e.read(args)
	var ed editFacts
	for i := range editPairs {
		o, n := e.vals[pairSlots+2*i], e.vals[pairSlots+2*i+1]
		if rawKind(o) == '"' && rawKind(n) == '"' {
			ed.old, ed.new = hashJSONString(o)|1, hashJSONString(n)|1
			f.bits |= argsReplace
			break
		}
	}
	if f.bits&argsReplace == 0 {
		for _, v := range e.vals[contentSlots:] {
			if rawKind(v) == '"' {
				ed.new = hashJSONString(v) | 1
				f.bits |= argsWrite
				break
			}
		}
		if f.bits&argsWrite == 0 {
			return // no edit: its path is of no use
		}
	}
	for _, v := range e.vals[:pairSlots] {
		if rawKind(v) == '"' {
			ed.path = jsonString(v)
			f.bits |= argsNamesPath
			break
		}
	}
	f.edit = new(editFacts) // only now: a pointer to ed would allocate it for every call
	*f.edit = ed
}

// known returns the call's argument facts.
func (c *Call) known() callFacts {
	if c.argBits&factsKnown != 0 {
		return c.storedFacts()
	}
	return argFactsOf(c)
}

// storedFacts are the facts stored in c (none: not known).
func (c *Call) storedFacts() callFacts {
	return callFacts{target: c.argTarget, edit: c.argEdit(), bits: c.argBits}
}

// storeFacts stores f in c.
func (c *Call) storeFacts(f callFacts) {
	c.argTarget, c.argBits = f.target, f.bits
	c.setExtra(f.edit, c.digest(), c.fail())
}

// facts returns the bits of the call's argument facts.
func (c *Call) facts() uint8 { return c.known().bits }

// onlyLooks is readOnly(c), known.
func (c *Call) onlyLooks() bool { return c.facts()&callReadOnly != 0 }
