//go:build !linux

package agentrun

import "syscall"

// childAttr is nil where the kernel cannot signal a child on its parent's
// death (Pdeathsig is Linux's).
func childAttr() *syscall.SysProcAttr { return nil }
