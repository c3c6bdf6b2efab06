//go:build unix

package main

import "syscall"

// maxOpenFiles returns the hard limit on the files this process may open.
func maxOpenFiles() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return uint64(lim.Max), true // int64 on FreeBSD
}
