package agentrun

import "syscall"

// childAttr makes the kernel kill the command if loopguard dies without
// forwarding a signal (SIGKILL, a crash), so that no agent is left running
// on its own. SIGKILL, not SIGTERM: an agent may ignore SIGTERM, and
// nothing is left to follow it up with a SIGKILL once loopguard is gone.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
