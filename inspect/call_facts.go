package inspect

import "strings"

// Facts of a call's arguments that rules ask of every call they read, on
// every request: computed once, with the arguments (parser.setArgs), so
// that a long cached session does not search each call's text again each
// turn. A Call built otherwise has none, and they are computed on use.
const (
	factsKnown      uint8 = 1 << iota
	argsQuoted            // Args holds a '"' (editUndo reads no other)
	argsPatch             // Args holds an apply_patch file header (patchFile)
	argsPathish           // Args spells "path" or "file", or has an escape: every pathKeys name does
	primaryRestores       // restoreHint(Primary): the command may restore a file
)

func argFactsOf(c *Call) uint8 {
	f := factsKnown
	if strings.IndexByte(c.Args, '"') >= 0 {
		f |= argsQuoted
	}
	if strings.Contains(c.Args, patchFile) {
		f |= argsPatch
	}
	if strings.Contains(c.Args, "path") || strings.Contains(c.Args, "file") || strings.IndexByte(c.Args, '\\') >= 0 {
		f |= argsPathish
	}
	if c.Primary != "" && restoreHint(c.Primary) {
		f |= primaryRestores
	}
	return f
}

// facts returns the call's argument facts.
func (c *Call) facts() uint8 {
	if c.argFacts&factsKnown != 0 {
		return c.argFacts
	}
	return argFactsOf(c)
}
