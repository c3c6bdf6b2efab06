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
	"errors"
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
	cmd  *exec.Cmd
	bin  string
	args []string // extra server arguments, kept for Restart
	log  string
	// done is closed when the process has exited; its goroutine (the
	// only one) waits on the process and ends with it.
	done chan struct{}
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
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, args: args,
			log: filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log")}
		err = s.start(dir)
		if err == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	tb.Fatalf("redistest: %v", lastErr)
	return nil
}

func (s *Server) start(dir string) error {
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command(s.bin, append([]string{
		"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", s.log,
		"--protected-mode", "yes"}, s.args...)...)
	// No pipes: output goes to the log file, so exec starts no copying
	// goroutines (goleak stays quiet).
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	if err := s.waitPing(10 * time.Second); err != nil {
		s.Stop()
		b, _ := os.ReadFile(s.log)
		return fmt.Errorf("redis-server on %s: %w; log: %s", s.Addr, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// Restart starts a server stopped with Stop again on the same port and
// directory, with the same arguments, as after an outage of the redis
// host. It comes back empty unless Start's args turned persistence on
// ("--appendonly", "yes"). It fails tb when the port was taken since.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if s.cmd != nil {
		tb.Fatal("redistest: Restart of a running server")
	}
	if err := s.start(filepath.Dir(s.log)); err != nil {
		tb.Fatalf("redistest: restart: %v", err)
	}
}

// Stop kills the server and waits for it. It is safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.Resume() // let a paused server run its exit path
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, as with a server stuck in a slow command.
func (s *Server) Pause() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume undoes Pause.
func (s *Server) Resume() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

func (s *Server) waitPing(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := ping(s.Addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v: %w", limit, err)
		}
		select {
		case <-s.done:
			return errors.New("exited before answering PING (port taken?)")
		case <-time.After(20 * time.Millisecond):
		}
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
