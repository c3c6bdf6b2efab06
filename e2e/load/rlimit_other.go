//go:build !unix

package main

// maxOpenFiles reports no limit: there is no RLIMIT_NOFILE here.
func maxOpenFiles() (uint64, bool) { return 0, false }
