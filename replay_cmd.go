package main

import (
	"fmt"
	"io"
)

func runReplay(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "loopguard replay: not built yet")
	return 2
}
