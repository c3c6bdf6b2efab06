package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// countCalls makes the raw system calls count themselves until the test
// ends; those that found EAGAIN are counted apart too.
func countCalls(t *testing.T) (calls, eagain *atomic.Int64) {
	calls, eagain = new(atomic.Int64), new(atomic.Int64)
	read, write, writev := sysRead, sysWrite, sysWritev
	count := func(errno syscall.Errno) {
		calls.Add(1)
		if errno == syscall.EAGAIN {
			eagain.Add(1)
		}
	}
	sysRead = func(fd uintptr, p []byte) (int, syscall.Errno) {
		n, errno := read(fd, p)
		count(errno)
		return n, errno
	}
	sysWrite = func(fd uintptr, p []byte) (int, syscall.Errno) {
		n, errno := write(fd, p)
		count(errno)
		return n, errno
	}
	sysWritev = func(fd uintptr, iov []syscall.Iovec) (int, syscall.Errno) {
		n, errno := writev(fd, iov)
		count(errno)
		return n, errno
	}
	t.Cleanup(func() { sysRead, sysWrite, sysWritev = read, write, writev })
	return calls, eagain
}

// TestRawCalls: a wrapped TCP connection's Read, Write and WriteBuffers
// are made as raw system calls (which do not enter the runtime's syscall
// state), not through the socket's own methods; a read that finds nothing
// parks on the netpoller and is made again once the socket is readable.
func TestRawCalls(t *testing.T) {
	d, a := tcpPair(t)
	c := Wrap(a)
	if _, ok := c.(*Conn); !ok {
		t.Fatalf("Wrap(TCP connection) = %T; want *Conn", c)
	}
	calls, eagain := countCalls(t)
	tests := []struct {
		name string
		do   func() error
	}{
		{"Write", func() error { _, err := c.Write([]byte("ping")); return err }},
		{"WriteBuffers", func() error {
			v := net.Buffers{[]byte("pi"), []byte("ng")}
			_, err := WriteBuffers(c, &v)
			return err
		}},
		{"Read", func() error {
			_, _ = d.Write([]byte("pong"))
			_, err := io.ReadFull(c, make([]byte, 4))
			return err
		}},
	}
	for _, tt := range tests {
		before := calls.Load()
		if err := tt.do(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if calls.Load() == before {
			t.Errorf("%s made no raw system call", tt.name)
		}
	}
	before := eagain.Load()
	done := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 1)); done <- err }()
	for deadline := time.Now().Add(5 * time.Second); eagain.Load() == before; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("a read with nothing to read made no raw call that found EAGAIN")
		}
	}
	_, _ = d.Write([]byte("x"))
	if err := <-done; err != nil {
		t.Fatalf("parked read: %v", err)
	}
}

// TestLargeWriteSlowReader: a write larger than the socket's buffers waits
// (EAGAIN, then parked until writable) for a slow reader as often as it has
// to, and all of it arrives in order.
func TestLargeWriteSlowReader(t *testing.T) {
	d, a := tcpPair(t)
	// Small buffers, so that the write must wait; not so small that the
	// peer's window stays shut under loopback's 64 KiB segments.
	_ = a.SetWriteBuffer(16 << 10)
	_ = d.SetReadBuffer(128 << 10)
	c := Wrap(a)
	_, eagain := countCalls(t)
	want := pattern(1 << 20)
	errc := make(chan error, 1)
	go func() {
		n, err := c.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		errc <- err
	}()
	_ = d.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	buf := make([]byte, 16<<10)
	for len(got) < len(want) {
		n, err := d.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		if len(got) < 256<<10 {
			time.Sleep(time.Millisecond) // slow at first: the writer must wait
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes read differ from those written")
	}
	if eagain.Load() == 0 {
		t.Error("no write found the socket full; the test proves nothing")
	}
}

// TestEpollCtl: a socket is added to an epoll set, reported once it is
// readable, and removed; a bad descriptor is refused with its errno.
func TestEpollCtl(t *testing.T) {
	d, a := tcpPair(t)
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(epfd)
	raw, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ctl := func(op int) (errno syscall.Errno) {
		err := raw.Control(func(fd uintptr) {
			ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
			errno = EpollCtl(epfd, op, int(fd), &ev)
		})
		if err != nil {
			t.Fatal(err)
		}
		return errno
	}
	if errno := ctl(unix.EPOLL_CTL_ADD); errno != 0 {
		t.Fatalf("EpollCtl(ADD) = %v", errno)
	}
	_, _ = d.Write([]byte("x"))
	evs := make([]unix.EpollEvent, 4)
	if n, err := unix.EpollWait(epfd, evs, 2000); n != 1 || err != nil {
		t.Fatalf("EpollWait after the peer wrote = %d, %v; want 1 event", n, err)
	}
	if errno := ctl(unix.EPOLL_CTL_DEL); errno != 0 {
		t.Fatalf("EpollCtl(DEL) = %v", errno)
	}
	if errno := ctl(unix.EPOLL_CTL_DEL); errno != syscall.ENOENT {
		t.Errorf("EpollCtl(DEL) of a socket not in the set = %v; want ENOENT", errno)
	}
	if errno := EpollCtl(epfd, unix.EPOLL_CTL_ADD, -1, &unix.EpollEvent{}); errno != syscall.EBADF {
		t.Errorf("EpollCtl(ADD, -1) = %v; want EBADF", errno)
	}
}

// TestPumpOneReadAnEvent: within Pump, a message that arrives while the
// step waits, or while it is still at the one before, costs one read: the
// read that took all the socket held lets the next Read answer
// ErrWouldBlock without a system call, and the wait that follows notices
// what arrived meanwhile. Read alone pays a second, empty read a message.
// Pump ends when the step says so, and with the socket's error when it is
// closed under the wait.
func TestPumpOneReadAnEvent(t *testing.T) {
	d, a := tcpPair(t)
	c := Wrap(a).(*Conn)
	calls, eagain := countCalls(t)
	const messages = 50
	got := make(chan int)
	go func() {
		for i := range messages {
			if _, err := d.Write([]byte("message\n")); err != nil {
				return
			}
			<-got // the next once the step has this one
			if i%2 == 0 {
				time.Sleep(time.Millisecond) // sometimes the step waits first
			}
		}
	}()
	buf := make([]byte, 64)
	read, blocked := 0, 0
	err := c.Pump(func() bool {
		for {
			n, err := c.Read(buf)
			if err == ErrWouldBlock {
				blocked++
				return false
			}
			if err != nil {
				t.Errorf("Read: %v", err)
				return true
			}
			read += n
			if read == messages*len("message\n") {
				return true
			}
			got <- read
		}
	})
	if err != nil {
		t.Fatalf("Pump = %v", err)
	}
	// The first call may find nothing yet; every message after it is one
	// read, which takes it whole.
	if n, empty := calls.Load(), eagain.Load(); n > messages+1 || empty > 1 {
		t.Errorf("%d messages: %d reads, %d of them empty; want one each", messages, n, empty)
	}
	if blocked < messages-1 {
		t.Errorf("the step waited %d times for %d messages", blocked, messages)
	}

	// Closed under the wait: Pump returns what Read would.
	go func() {
		time.Sleep(20 * time.Millisecond)
		c.Close()
	}()
	err = c.Pump(func() bool {
		_, err := c.Read(buf)
		return err != ErrWouldBlock
	})
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("Pump on a socket closed under it = %v; want net.ErrClosed", err)
	}
}
