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
	bin  string
	dir  string
	args []string // extra server arguments, kept for Restart
	proc *testproc.Process
}

// URL returns the server's redis:// URL for database db.
func (s *Server) URL(db int) string { return "redis://" + s.Addr + "/" + strconv.Itoa(db) }

// Start launches a redis-server for tb and registers its shutdown with
// tb.Cleanup. args are passed to the server after loopguard's own, e.g.
// "--requirepass", "secret".
func Start(tb testing.TB, args ...string) *Server {
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
		port, err := testproc.FreePort()
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, dir: dir, args: args}
		if lastErr = s.start(); lastErr == nil {
			tb.Cleanup(s.Stop)
			return s
		}
	}
	tb.Fatalf("redistest: %v", lastErr)
	return nil
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	// Without --logfile redis logs to stdout, which goes to the log file.
	proc, err := testproc.Start(s.bin, append([]string{
		"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "yes"}, s.args...), filepath.Join(s.dir, "redis-"+port+".log"))
	if err != nil {
		return err
	}
	s.proc = proc
	if err := proc.WaitReady(10*time.Second, 20*time.Millisecond, func() error { return ping(s.Addr) }); err != nil {
		s.Stop()
		return fmt.Errorf("redis-server on %s: %w; log: %s", s.Addr, err, proc.LogTail(4000))
	}
	return nil
}

// Restart starts a server stopped with Stop again on the same port and
// directory, with the same arguments, as after an outage of the redis
// host. It comes back empty unless Start's args turned persistence on
// ("--appendonly", "yes"). It fails tb when the port was taken since.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if s.proc != nil {
		tb.Fatal("redistest: Restart of a running server")
	}
	if err := s.start(); err != nil {
		tb.Fatalf("redistest: restart: %v", err)
	}
}

// Stop kills the server and waits for it. It is safe to call twice.
func (s *Server) Stop() {
	if s.proc == nil {
		return
	}
	s.Resume() // let a paused server run its exit path
	s.proc.Stop()
	s.proc = nil
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, as with a server stuck in a slow command. It does nothing where
// there is no SIGSTOP (Windows).
func (s *Server) Pause() {
	if s.proc != nil && sigStop != nil {
		s.proc.Signal(sigStop)
	}
}

// Resume undoes Pause.
func (s *Server) Resume() {
	if s.proc != nil && sigCont != nil {
		s.proc.Signal(sigCont)
	}
}

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
	// A server with --requirepass answers NOAUTH: it is up all the same.
	if l := strings.TrimSpace(line); l != "+PONG" && !strings.HasPrefix(l, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
