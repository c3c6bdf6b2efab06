package main

import (
	"fmt"
	"io"
)

func runDemo(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "loopguard demo: not built yet")
	return 2
}
