// Package testproc runs a server binary as a child process for tests: its
// output goes to a log file, Start's caller waits for it to be ready, and
// Stop kills it and waits for it. internal/redistest (redis-server) and
// e2e/llamaserver (llama.cpp's llama-server) build on it.
package testproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Process is a running child process owned by one test.
type Process struct {
	cmd *exec.Cmd
	// Log is the file that holds the process's stdout and stderr.
	Log string
	// done is closed when the process has exited; its goroutine (the
	// only one) waits on the process and ends with it.
	done chan struct{}
}

// Start runs bin with args, its output going to the file log.
func Start(bin string, args []string, log string) (*Process, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := &Process{cmd: exec.Command(bin, args...), Log: log, done: make(chan struct{})}
	// An *os.File, not a pipe: exec starts no copying goroutines, and
	// goleak stays quiet.
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// WaitReady calls ready every interval until it returns nil, and fails
// when limit has passed or the process has exited (a port taken between
// probing and binding, mostly).
func (p *Process) WaitReady(limit, interval time.Duration, ready func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %w", limit, err)
		}
		select {
		case <-p.done:
			return errors.New("exited before it was ready (port taken?)")
		case <-time.After(interval):
		}
	}
}

// Signal sends sig to the process if it runs.
func (p *Process) Signal(sig os.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Stop kills the process and waits for it. It is safe to call twice.
func (p *Process) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// LogTail returns the last n bytes of the process's output.
func (p *Process) LogTail(n int) string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
