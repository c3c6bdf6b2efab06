package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// childEnv makes the test binary a loopguard serving under a descriptor
// limit (runDescriptorChild) instead of running tests.
const childEnv = "LOOPGUARD_TEST_FD_CHILD"

// TestMain runs before any test; the child is started by re-running the
// test binary, so it checks for its role first.
func init() {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runDescriptorChild())
	}
}

// runDescriptorChild serves a proxy with at most 64 descriptors, prints its
// address, and serves until its stdin closes: exit 0; 3 if Serve failed.
func runDescriptorChild() int {
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 64, Max: 64}); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		return 2
	}
	cfg := DefaultConfig()
	cfg.Upstream.URL = "http://127.0.0.1:1"
	srv, err := New(cfg, zerolog.Nop())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	stdin := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdin)
	}()
	select {
	case err := <-served:
		fmt.Fprintln(os.Stderr, "serve failed:", err)
		return 3
	case <-stdin:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	return 0
}

// TestAcceptSurvivesDescriptorExhaustion: a loopguard process out of
// descriptors under a burst of connections keeps serving the ones it has,
// leaves the rest waiting, and serves new ones once the burst is gone;
// fasthttp alone would take the accept error as the listener's end.
func TestAcceptSurvivesDescriptorExhaustion(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once the child exited; waitErr says how
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v; stderr: %s", err, stderr.String())
	}
	addr = strings.TrimSpace(addr)

	// One connection with a request in flight before the burst.
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	firstRd := bufio.NewReader(first)
	healthz := func(c net.Conn, rd *bufio.Reader) error {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := healthz(first, firstRd); err != nil {
		t.Fatalf("before the burst: %v", err)
	}

	// The burst: twice the child's descriptors, held open.
	var burst []net.Conn
	defer func() {
		for _, c := range burst {
			c.Close()
		}
	}()
	for range 128 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break // the listen queue is full: enough
		}
		burst = append(burst, c)
	}
	// The child has run out: wait until its accepts fail (its descriptors
	// are counted in /proc), then a little for it to fall over if it will.
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for openFDs(pid) < 60 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case <-exited:
		t.Fatalf("the child exited under the burst (%v): %s", waitErr, stderr.String())
	default:
	}
	if err := healthz(first, firstRd); err != nil {
		t.Fatalf("a connection open before the burst, during it: %v", err)
	}

	for _, c := range burst {
		c.Close()
	}
	burst = nil
	// Once the burst is gone, a new client is served.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := healthz(c, bufio.NewReader(c)); err != nil {
		t.Fatalf("a new connection after the burst: %v; stderr: %s", err, stderr.String())
	}
	select {
	case <-exited:
		t.Fatalf("the child exited (%v): %s", waitErr, stderr.String())
	default:
	}
}

// openFDs counts the descriptors process pid has open.
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return len(ents)
}

// TestPeerWatcherRetriesSetup: a watcher that could not set itself up (out
// of descriptors) tries again later, so hang-up detection comes back.
func TestPeerWatcherRetriesSetup(t *testing.T) {
	create := epollCreate
	fail := true
	epollCreate = func(flags int) (int, error) {
		if fail {
			return -1, syscall.EMFILE
		}
		return create(flags)
	}
	t.Cleanup(func() { epollCreate = create })
	var w peerWatcher
	defer w.close()
	d, a := tcpPair(t)
	onClose, fired := fires()
	if p := w.watch(a, onClose); p != nil {
		t.Fatal("watch while epoll_create fails: a watch; want none")
	}
	fail = false
	w.mu.Lock()
	w.retryAt = time.Now() // as after watchRetry
	w.mu.Unlock()
	p := w.watch(a, onClose)
	if p == nil {
		t.Fatal("watch once epoll_create works again: none; want a watch")
	}
	defer p.stop()
	d.Close()
	wantFired(t, fired, "client closed after the watcher recovered")
}
