//go:build unix

package inspect

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the process has used: on a
// shared machine it measures the work, where wall time also counts the
// other processes.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
