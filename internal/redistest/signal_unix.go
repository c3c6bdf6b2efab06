//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// The signals that freeze a process and let it go on.
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
