package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
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
	sysWritev = func(fd uintptr, iov []unix.Iovec) (int, syscall.Errno) {
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
// step waits costs one read: the read that took all the socket held lets
// the next Read answer ErrWouldBlock without a system call, and the wait
// that follows notices what arrives. Read alone pays a second, empty read a
// message. When the waits are short (the peer is ahead of the step), a
// short read is followed by another, as bytes most often came meanwhile.
// Pump ends when the step says so, and with the socket's error when it is
// closed under the wait.
func TestPumpOneReadAnEvent(t *testing.T) {
	for _, tt := range []struct {
		name string
		wait time.Duration // what each wait takes, by the clock Pump reads
		// reads beyond one a message: none at a model's pace, one empty
		// read a message when ahead
		extra int
	}{
		{"at a model's pace", 50 * time.Millisecond, 0},
		{"ahead", 10 * time.Microsecond, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, a := tcpPair(t)
			c := Wrap(a).(*Conn)
			clock := monotonic
			var now time.Duration
			monotonic = func() time.Duration { now += tt.wait / 2; return now } // read twice a wait
			t.Cleanup(func() { monotonic = clock })
			calls, eagain := countCalls(t)
			const messages = 50
			got := make(chan int)
			go func() {
				for range messages {
					if _, err := d.Write([]byte("message\n")); err != nil {
						return
					}
					<-got // the next once the step has this one
					time.Sleep(time.Millisecond)
				}
			}()
			buf := make([]byte, 64)
			read := 0
			err := c.Pump(func() bool {
				for {
					n, err := c.Read(buf)
					if err == ErrWouldBlock {
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
			// The first call may find nothing yet. Ahead, a message the
			// writer sent before the step's next read (a slow step) is read
			// there, not after a wait: fewer reads, never more.
			n, empty := calls.Load(), eagain.Load()
			if n > int64(messages*(1+tt.extra))+1 || empty > int64(messages*tt.extra)+1 || empty < int64(messages*tt.extra/2) {
				t.Errorf("%d messages: %d reads, %d of them empty; want %d a message", messages, n, empty, 1+tt.extra)
			}
		})
	}
	t.Run("closed under the wait", func(t *testing.T) {
		_, a := tcpPair(t)
		c := Wrap(a).(*Conn)
		go func() {
			time.Sleep(20 * time.Millisecond)
			c.Close()
		}()
		buf := make([]byte, 64)
		err := c.Pump(func() bool {
			_, err := c.Read(buf)
			return err != ErrWouldBlock
		})
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Pump on a socket closed under it = %v; want net.ErrClosed", err)
		}
	})
}

// TestWriteStall: with a stall bound, a write to a peer that stopped
// reading fails with a timeout once its socket stays full that long
// (both Write and WriteBuffers); a peer that reads slowly but steadily is
// never cut, and the deadline a wait armed does not fail a later write.
func TestWriteStall(t *testing.T) {
	const stall = 200 * time.Millisecond
	big := pattern(8 << 20) // more than both sockets' buffers hold
	t.Run("peer never reads", func(t *testing.T) {
		for _, how := range []string{"Write", "WriteBuffers"} {
			t.Run(how, func(t *testing.T) {
				_, a := tcpPair(t)
				c := Wrap(a).(*Conn)
				c.SetWriteStall(stall)
				errc := make(chan error, 1)
				go func() {
					var err error
					if how == "Write" {
						_, err = c.Write(big)
					} else {
						v := net.Buffers{big[:1<<20], big[1<<20:]}
						_, err = c.WriteBuffers(&v)
					}
					errc <- err
				}()
				select {
				case err := <-errc:
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatalf("%s to a peer that never reads = %v; want a deadline error", how, err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s to a peer that never reads still blocked after 10s with a %v stall bound", how, stall)
				}
			})
		}
	})
	t.Run("slow reader", func(t *testing.T) {
		d, a := tcpPair(t)
		_ = a.SetWriteBuffer(16 << 10)
		_ = d.SetReadBuffer(128 << 10) // not so small that the window stays shut
		c := Wrap(a).(*Conn)
		c.SetWriteStall(stall)
		want := pattern(512 << 10)
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(want)
			errc <- err
		}()
		// 512 KiB in 16 KiB reads a few milliseconds apart: the whole write
		// takes several stall bounds, no single wait takes one.
		var got []byte
		buf := make([]byte, 16<<10)
		_ = d.SetReadDeadline(time.Now().Add(20 * time.Second))
		for len(got) < len(want) {
			n, err := d.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				t.Fatalf("read after %d bytes: %v (write: %v)", len(got), err, <-errc)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := <-errc; err != nil {
			t.Fatalf("write to a slow but steady reader: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatal("the bytes read differ from those written")
		}
		// Long after the last wait, a write the socket takes at once works.
		time.Sleep(2 * stall)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatalf("a write after the stall bound passed idle: %v", err)
		}
	})
}

// aheadBufs counts ReadAhead's buffers: taken, and out (taken and not
// given back).
type aheadBufs struct {
	mu         sync.Mutex
	taken, out int
}

func (b *aheadBufs) get() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.taken++
	b.out++
	return make([]byte, 16)
}

func (b *aheadBufs) put([]byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.out--
}

func (b *aheadBufs) outstanding() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out
}

// TestReadAhead: a small read takes what the socket holds, up to the
// buffer, in one read, gives the first bytes and returns the rest; while it
// waits for the client it holds no buffer, and one that brought nothing
// goes back.
func TestReadAhead(t *testing.T) {
	d, a := tcpPair(t)
	c := Wrap(a).(*Conn)
	var bufs aheadBufs
	one := make([]byte, 1)

	t.Run("bytes waiting", func(t *testing.T) {
		if _, err := d.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // all of it in the socket
		n, rest, err := c.ReadAhead(one, bufs.get, bufs.put)
		if n != 1 || one[0] != 'G' || string(rest) != "ET / HTTP/1.1\r\n" || err != nil {
			t.Fatalf("ReadAhead = %d %q, rest %q, %v; want 1 \"G\", rest \"ET / HTTP/1.1\\r\\n\"", n, one[:n], rest, err)
		}
		if got := bufs.outstanding(); got != 1 {
			t.Fatalf("%d buffers out with bytes in one; want 1", got)
		}
		bufs.put(rest)
	})

	t.Run("no buffer held while waiting", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			n, rest, err := c.ReadAhead(one, bufs.get, bufs.put)
			if err == nil && (n != 1 || one[0] != 'x' || rest != nil) {
				err = errors.New("not the one byte sent")
			}
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		if got := bufs.outstanding(); got != 0 {
			t.Errorf("%d buffers out while waiting for the client; want 0", got)
		}
		if _, err := d.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := bufs.outstanding(); got != 0 {
			t.Errorf("%d buffers out after a read that took all; want 0", got)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		defer c.SetReadDeadline(time.Time{})
		if _, _, err := c.ReadAhead(one, bufs.get, bufs.put); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("ReadAhead past its deadline: %v; want os.ErrDeadlineExceeded", err)
		}
		if got := bufs.outstanding(); got != 0 {
			t.Errorf("%d buffers out after a timeout; want 0", got)
		}
	})

	t.Run("peer closed", func(t *testing.T) {
		d.Close()
		if _, _, err := c.ReadAhead(one, bufs.get, bufs.put); err != io.EOF {
			t.Errorf("ReadAhead after the peer closed: %v; want io.EOF", err)
		}
		if got := bufs.outstanding(); got != 0 {
			t.Errorf("%d buffers out after EOF; want 0", got)
		}
	})
}
