package rawsock

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxRW bounds the bytes one system call moves: a goroutine inside a raw
// call cannot be preempted, so a stop-the-world waits for it.
const maxRW = 64 << 10

// maxIov is how many buffers one sendmsg takes; WriteBuffers sends more in
// several.
const maxIov = 4

// Conn is a TCP connection whose Read and Write (and WriteBuffers) make raw
// system calls on its socket; every other method is the socket's own. As a
// net.Conn, it may be used by several goroutines at once.
type Conn struct {
	net.Conn
	raw syscall.RawConn

	// Each direction's operation lives here rather than in closures, so that
	// the callbacks given to raw are made once per connection, not per call.
	rmu   sync.Mutex // held by Read and Pump, which own the fields up to wmu
	rbuf  []byte
	rn    int
	rerr  error
	readf func(fd uintptr) bool
	// ReadAhead's: where its buffer comes from and goes back to, and its
	// callback.
	rget       func() []byte
	rput       func([]byte)
	readAheadf func(fd uintptr) bool
	// Pump's: its step, the socket while step runs, whether the last read
	// there took all the socket held, when step last returned false to
	// wait, and whether that wait was short (ahead).
	step    func() bool
	pumpf   func(fd uintptr) bool
	pumpFD  uintptr
	pumping bool
	drained bool
	ahead   bool
	waitAt  time.Duration

	wmu sync.Mutex // held by Write and writeBuffers, which own the rest
	// stall bounds a write's wait for the peer to take bytes (SetWriteStall);
	// stalled: a wait armed the write deadline, which the write clears.
	stall   time.Duration
	stalled bool
	wbuf    []byte
	wbufs   *net.Buffers
	iov     [maxIov]unix.Iovec
	wn      int64
	werr    error
	writef  func(fd uintptr) bool
	writevf func(fd uintptr) bool
}

// Wrap returns c as a *Conn when it is a TCP connection, and c itself
// otherwise (in-memory pipes, TLS).
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rc := &Conn{Conn: c, raw: raw}
	rc.readf, rc.writef, rc.writevf, rc.pumpf, rc.readAheadf = rc.read, rc.write, rc.writev, rc.pump, rc.readAhead
	return rc
}

// SyscallConn returns the socket's raw connection: the wrapper must not hide
// it from those who watch the socket (the proxy's peer watcher).
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.raw, nil }

// The system calls Conn makes, as variables so that a test can count them.
//
// They are the socket calls (recvfrom, sendto, sendmsg), not read, write
// and writev: those go through the kernel's file layer first (vfs_read,
// vfs_writev: the file's position lock, permission hooks, fsnotify), which
// reads cache lines of the file and its inode that the socket calls never
// touch. With thousands of open streams each of those lines is a miss by
// the stream's next event (docs/streams.md). MSG_NOSIGNAL: a write to a peer that
// has gone fails with EPIPE, as Go's own writes do, without a SIGPIPE for
// the runtime to catch first.
var (
	sysRead = func(fd uintptr, p []byte) (int, syscall.Errno) {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
		return int(n), errno
	}
	sysWrite = func(fd uintptr, p []byte) (int, syscall.Errno) {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), syscall.MSG_NOSIGNAL, 0, 0)
		return int(n), errno
	}
	sysWritev = func(fd uintptr, iov []unix.Iovec) (int, syscall.Errno) {
		msg := unix.Msghdr{Iov: &iov[0]}
		msg.SetIovlen(len(iov))
		n, _, errno := syscall.RawSyscall(syscall.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&msg)), syscall.MSG_NOSIGNAL)
		return int(n), errno
	}
)

// SetWriteStall bounds how long a write waits for the peer to take bytes:
// once the socket's send buffer is full and stays full for d, the write
// fails with a timeout (os.ErrDeadlineExceeded), whatever it wrote before.
// A peer that stops reading would otherwise hold the writer forever. The
// deadline is armed only when a write has to wait, so a write the socket
// takes at once costs nothing more; each wait arms it anew, so a slow peer
// that still reads is never cut. 0 (the default): no bound. It must not be
// called while a write runs, and it replaces write deadlines: a Conn with
// a stall bound must not be given one.
func (c *Conn) SetWriteStall(d time.Duration) {
	c.wmu.Lock()
	c.stall = d
	c.wmu.Unlock()
}

// Read reads as the socket's own Read does: what one read returns, io.EOF
// once the peer has closed, and a *net.OpError otherwise.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.Conn.Read(p) // no system call; an error once closed
	}
	if c.pumping {
		return c.readInPump(p)
	}
	c.rmu.Lock()
	c.rbuf, c.rn = p, 0
	err := c.raw.Read(c.readf)
	n := c.rn
	if err == nil {
		err = c.rerr
	}
	c.rbuf, c.rerr = nil, nil
	c.rmu.Unlock()
	if err != nil {
		return 0, c.opError("read", err)
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// read is raw's callback for Read: false parks the goroutine on the
// netpoller until the socket is readable (or the deadline passes, or the
// socket is closed) and is called again.
func (c *Conn) read(fd uintptr) bool {
	p := c.rbuf
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	for {
		n, errno := sysRead(fd, p)
		switch errno {
		case 0:
			c.rn = n
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			c.rerr = errno
		}
		return true
	}
}

// ReadAhead is Read for a caller that asks for fewer bytes than the socket
// likely holds, and then for the rest (fasthttp reads one byte of a
// kept-alive connection's next request, then what follows): it waits as
// Read does, and once the socket has bytes it reads as many as the buffer
// get returns holds. get is called only then, so that a connection waiting
// for its client holds no buffer; put takes it back when nothing came. The
// first bytes go to p (n of them), and rest holds the others, in the
// buffer, for the caller to hand out before it reads again; rest is nil
// when n took all. One read where two were made.
func (c *Conn) ReadAhead(p []byte, get func() []byte, put func([]byte)) (n int, rest []byte, err error) {
	if len(p) == 0 {
		n, err = c.Read(p)
		return n, nil, err
	}
	if c.pumping {
		n, err = c.readInPump(p)
		return n, nil, err
	}
	c.rmu.Lock()
	c.rget, c.rput, c.rbuf, c.rn = get, put, nil, 0
	err = c.raw.Read(c.readAheadf)
	buf, got := c.rbuf, c.rn
	if err == nil {
		err = c.rerr
	}
	c.rget, c.rput, c.rbuf, c.rerr = nil, nil, nil, nil
	c.rmu.Unlock()
	if err != nil || got == 0 {
		if buf != nil {
			put(buf)
		}
		if err != nil {
			return 0, nil, c.opError("read", err)
		}
		return 0, nil, io.EOF
	}
	n = copy(p, buf[:got])
	if n == got {
		put(buf)
		return n, nil, nil
	}
	return n, buf[n:got], nil
}

// readAhead is raw's callback for ReadAhead: read's, into a buffer taken
// for the read and given back when the socket had nothing.
func (c *Conn) readAhead(fd uintptr) bool {
	buf := c.rget()
	c.rbuf = buf
	if !c.read(fd) {
		c.rput(buf)
		c.rbuf = nil
		return false
	}
	return true
}

// Pump calls step until it returns true, and waits for the socket to become
// readable each time it returns false. Within step, Read never waits: when
// the socket has nothing, it returns ErrWouldBlock, and step returns false
// to wait. Pump returns what would have ended a Read's wait: a deadline,
// the socket's closing. Only step may Read while Pump runs.
//
// A relay that reads each event with Read pays two reads an event: the
// event's, and the one after it that finds nothing and waits, because each
// Read begins a new wait on the netpoller and forgets that the socket became
// readable in between. Pump waits in one netpoller wait (syscall.RawConn's
// Read), which notes the socket becoming readable while step writes an
// event; so once a read took all the socket held (it filled less than its
// buffer), Read answers ErrWouldBlock without a system call, and the next
// event costs one read.
//
// That holds while the peer's bytes come slower than step handles them,
// as a model's tokens do. When they come faster (an upstream ahead of its
// relay), more have most often come while step handled the last, and the
// poller learns of them only when the runtime next polls: a wait then
// costs a park, a poll and a wake where a read would have found them. So
// after a wait shorter than aheadWait, Read reads on after a short read,
// until a read finds nothing.
func (c *Conn) Pump(step func() bool) error {
	c.rmu.Lock()
	c.step, c.pumping = step, true
	err := c.raw.Read(c.pumpf)
	c.step, c.pumping = nil, false
	c.rmu.Unlock()
	if err != nil {
		return c.opError("read", err)
	}
	return nil
}

// pump is raw's callback for Pump: the socket became readable (or this is
// the first call), so Read reads again.
func (c *Conn) pump(fd uintptr) bool {
	c.pumpFD, c.drained = fd, false
	c.ahead = c.waitAt != 0 && monotonic()-c.waitAt < aheadWait
	if c.step() {
		return true
	}
	c.waitAt = monotonic()
	return false
}

// aheadWait is the longest wait for the socket that shows its peer ahead
// of the step (Pump): far shorter than the pause between a model's tokens,
// far longer than a wake-up.
const aheadWait = 100 * time.Microsecond

// monotonic reads the monotonic clock alone; a variable, so that a test
// can set the pace.
var monotonic = func() time.Duration { return time.Since(clockBase) }

var clockBase = time.Now()

// readInPump is Read within Pump's step.
func (c *Conn) readInPump(p []byte) (int, error) {
	if c.drained && !c.ahead {
		return 0, ErrWouldBlock
	}
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	for {
		n, errno := sysRead(c.pumpFD, p)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno == syscall.EAGAIN:
			c.drained = true
			return 0, ErrWouldBlock
		case errno != 0:
			return 0, c.opError("read", errno)
		case n == 0:
			return 0, io.EOF
		}
		c.drained = n < len(p)
		return n, nil
	}
}

// Write writes all of p, as the socket's own Write does.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.wbuf, c.wn = p, 0
	err := c.raw.Write(c.writef)
	n := int(c.wn)
	if err == nil {
		err = c.werr
	}
	c.wbuf, c.werr = nil, nil
	c.unstall()
	c.wmu.Unlock()
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

// WriteBuffers writes all of v to c and consumes it, as v.WriteTo(c) does,
// with one sendmsg a few buffers also when c is a *Conn: net.Buffers sees no
// socket in a Conn, and would write each buffer with a call of its own.
func WriteBuffers(c net.Conn, v *net.Buffers) (int64, error) {
	if rc, ok := c.(*Conn); ok {
		return rc.WriteBuffers(v)
	}
	return v.WriteTo(c)
}

// WriteBuffers writes all of v and consumes it, with one sendmsg a few
// buffers.
func (c *Conn) WriteBuffers(v *net.Buffers) (int64, error) {
	c.wmu.Lock()
	c.wbufs, c.wn = v, 0
	err := c.raw.Write(c.writevf)
	n := c.wn
	if err == nil {
		err = c.werr
	}
	c.wbufs, c.werr = nil, nil
	c.iov = [maxIov]unix.Iovec{} // holds no caller's buffer
	c.unstall()
	c.wmu.Unlock()
	if err != nil {
		return n, c.opError("writev", err)
	}
	return n, nil
}

// write is raw's callback for Write: false parks the goroutine until the
// socket is writable.
func (c *Conn) write(fd uintptr) bool {
	for int(c.wn) < len(c.wbuf) {
		p := c.wbuf[c.wn:]
		if len(p) > maxRW {
			p = p[:maxRW]
		}
		n, errno := sysWrite(fd, p)
		switch c.outcomeOf(n, errno) {
		case park:
			c.armStall()
			return false
		case finish:
			return true
		}
	}
	return true
}

// writev is raw's callback for WriteBuffers, as write is for Write.
func (c *Conn) writev(fd uintptr) bool {
	v := c.wbufs
	for {
		iov, size := c.iov[:0], 0
		for _, b := range *v {
			if len(b) == 0 {
				continue
			}
			b = b[:min(len(b), maxRW-size)]
			iov = append(iov, unix.Iovec{Base: &b[0]})
			iov[len(iov)-1].SetLen(len(b))
			if size += len(b); len(iov) == maxIov || size == maxRW {
				break
			}
		}
		if len(iov) == 0 {
			*v = (*v)[len(*v):]
			return true
		}
		n, errno := sysWritev(fd, iov)
		switch c.outcomeOf(n, errno) {
		case park:
			c.armStall()
			return false
		case finish:
			return true
		case written:
			consume(v, n)
		}
	}
}

// armStall arms the write deadline a stall bound away before a write
// waits for the socket; wmu is held. The deadline is set from within raw's
// callback, before raw waits: setting it takes no lock that the write holds.
func (c *Conn) armStall() {
	if c.stall > 0 {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.stall))
		c.stalled = true
	}
}

// unstall clears a deadline armStall set, so that it cannot fail the next
// write, which may come long after; wmu is held.
func (c *Conn) unstall() {
	if c.stalled {
		c.stalled = false
		_ = c.Conn.SetWriteDeadline(time.Time{})
	}
}

// outcome is what one write system call leaves a write to do.
type outcome int

const (
	written outcome = iota // it wrote n bytes: go on
	retry                  // EINTR: write again
	park                   // EAGAIN: wait until the socket is writable
	finish                 // it failed: werr says how
)

// outcomeOf accounts for one write's result.
func (c *Conn) outcomeOf(n int, errno syscall.Errno) outcome {
	switch {
	case errno == syscall.EINTR:
		return retry
	case errno == syscall.EAGAIN:
		return park
	case errno != 0:
		c.werr = errno
		return finish
	case n == 0:
		c.werr = io.ErrUnexpectedEOF // as net has it; a socket never does this
		return finish
	}
	c.wn += int64(n)
	return written
}

// consume drops the first n bytes of v, as net.Buffers' own writes do.
func consume(v *net.Buffers, n int) {
	for len(*v) > 0 && n >= len((*v)[0]) {
		n -= len((*v)[0])
		(*v)[0] = nil
		*v = (*v)[1:]
	}
	if len(*v) > 0 {
		(*v)[0] = (*v)[0][n:]
	}
}

// opError makes err look as the socket's own methods' errors do: raw names
// its errors' operations "raw-read" and "raw-write" (a deadline, a closed
// socket), and a system call's errno comes bare.
func (c *Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		oe.Op = op
		return oe
	}
	if errno, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError(op, errno)
	}
	local := c.LocalAddr()
	return &net.OpError{Op: op, Net: local.Network(), Source: local, Addr: c.RemoteAddr(), Err: err}
}

// Peek looks at what the socket fd holds, without taking it or waiting
// (recv of one byte, MSG_PEEK|MSG_DONTWAIT), as a raw system call: n is 1
// when bytes wait, and 0 with errno 0 once the peer has closed; errno is
// EAGAIN when nothing came.
func Peek(fd uintptr) (n int, errno syscall.Errno) {
	var b [1]byte
	r, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), 0
}

// EpollCtl is epoll_ctl(2) as a raw system call, which it can be: it never
// blocks.
func EpollCtl(epfd, op, fd int, ev *unix.EpollEvent) syscall.Errno {
	_, _, errno := syscall.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd),
		uintptr(unsafe.Pointer(ev)), 0, 0)
	return errno
}
