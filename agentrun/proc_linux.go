package agentrun

import "syscall"

// childAttr makes the kernel send the command SIGTERM if loopguard dies
// without forwarding a signal (SIGKILL, a crash), so that no agent is left
// running on its own.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
