// Package redistest runs a throwaway redis-server for tests.
//
// Start launches the real server (Debian package redis-server) on a free
// loopback port with persistence off and a temporary directory, waits until
// it answers PING, and stops it when the test ends. When the binary is
// missing the test is skipped, unless LOOPGUARD_REQUIRE_REDIS is set (CI
// sets it to 1), in which case it fails.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loopguard/loopguard/internal/testproc"
)

// EnvBinary names the redis-server binary to run instead of the one on PATH.
const EnvBinary = "LOOPGUARD_REDIS_SERVER"

// EnvRequire, when set to anything but "" or "0", turns a missing binary
// into a test failure instead of a skip.
const EnvRequire = "LOOPGUARD_REQUIRE_REDIS"

// Server is a running redis-server owned by one test.
type Server struct {
	// Addr is host:port on loopback.
	Addr string
	proc *testproc.Process
}

// URL returns the server's redis:// URL for database db.
func (s *Server) URL(db int) string { return "redis://" + s.Addr + "/" + strconv.Itoa(db) }

// Start launches a redis-server for tb and registers its shutdown with
// tb.Cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := os.Getenv(EnvBinary)
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			if r := os.Getenv(EnvRequire); r != "" && r != "0" {
				tb.Fatalf("redis-server not found on PATH and %s=%s: install the redis-server package", EnvRequire, r)
			}
			tb.Skipf("redis-server not found on PATH (install the redis-server package; set %s=1 to make this a failure)", EnvRequire)
		}
	}
	dir := tb.TempDir()
	var lastErr error
	// A free port can be taken between probing and binding; try a few.
	for range 5 {
		s, err := start(bin, dir)
		if err == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	tb.Fatalf("redistest: %v", lastErr)
	return nil
}

func start(bin, dir string) (*Server, error) {
	port, err := testproc.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	log := filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log")
	// Without --logfile redis logs to stdout, which goes to log.
	s.proc, err = testproc.Start(bin, []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir,
		"--protected-mode", "yes"}, log)
	if err != nil {
		return nil, err
	}
	if err := s.proc.WaitReady(10*time.Second, 20*time.Millisecond, func() error { return ping(s.Addr) }); err != nil {
		s.Stop()
		return nil, fmt.Errorf("redis-server on %s: %w; log: %s", s.Addr, err, s.proc.LogTail(4000))
	}
	return s, nil
}

// Stop kills the server and waits for it. It is safe to call twice.
func (s *Server) Stop() {
	s.Resume() // let a paused server run its exit path
	s.proc.Stop()
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, as with a server stuck in a slow command.
func (s *Server) Pause() { s.proc.Signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Server) Resume() { s.proc.Signal(syscall.SIGCONT) }

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
