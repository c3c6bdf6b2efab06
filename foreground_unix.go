//go:build unix

package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// foreground reports whether loopguard is in the foreground process group of
// the terminal r is: a Ctrl-C typed there reaches the command directly.
func foreground(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
