//go:build !unix

package redistest

import "os"

// No signal freezes a process here: Pause and Resume do nothing.
var sigStop, sigCont os.Signal
