package proxy

import (
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/loopguard/loopguard/internal/rawsock"
	"golang.org/x/sys/unix"
)

// peerWatcher calls a connection's onClose as soon as the client closes its
// side of it, for all the connections of one server at once.
//
// fasthttp reports a vanished client only as a failed write, and the first
// write after the peer left can still succeed (fasthttp #771): while the
// upstream is silent (prompt processing) nothing is written, so nothing would
// be noticed and the GPU would keep generating for nobody. The watcher waits
// for the watched sockets to become readable and peeks at them (MSG_PEEK, so
// no byte of a pipelined request is consumed): a zero-byte read is the
// client's FIN.
//
// One epoll instance and one goroutine serve every watched connection: a
// goroutine parked per open stream costs its stack (8 KiB and more) beside
// the connection's own, and thousands of streams stay open at once
// (docs/streams.md). Both are made on the first watch and end with close.
//
// A client connection of the server's own (clientConn) is registered once,
// on its first watch, and stays in the epoll set until it is closed: for
// its hang-up alone (EPOLLRDHUP, edge-triggered), so that its next request
// does not wake the watcher, and a watch of its later requests costs no
// system call, where adding and deleting it cost two a request. A hang-up
// while nothing is watched is kept on the connection (peerReg) for its next
// watch. Other sockets are registered one-shot for each watch: after an
// event the socket is not reported again until it is re-armed, so a client
// that pipelines its next request wakes the watcher once, which then stops
// watching it.
type peerWatcher struct {
	mu    sync.Mutex
	fired sync.Cond // an onClose call returned; L is &mu
	epfd  int
	wake  int // an eventfd in the epoll set: written by close to end run
	// started: epfd and wake are set up and run is running; closed: close
	// was called.
	started, closed bool
	// retryAt: setting epfd and wake up failed (out of descriptors, most
	// likely), and is not tried again before then; until it works nothing
	// is watched, and write errors still end streams.
	retryAt time.Time
	// byFD holds the armed watches by socket. A socket's number is reused
	// once it is closed; each watch's gen, carried in its epoll event, tells
	// a late event of an older watch from one of the current.
	byFD map[int32]*peerWatch
	// regs holds the registrations of client connections by socket, a
	// closed connection's until its number is reused; their gen tells
	// their events apart as a watch's does.
	regs map[int32]*peerReg
	gen  uint32
	done chan struct{} // closed when run returns
}

// peerWatch is one watched connection. Watches are pooled: a stopped one is
// reused by a later request.
type peerWatch struct {
	w       *peerWatcher
	raw     syscall.RawConn
	fd      int32
	gen     uint32
	onClose func()
	firing  bool // run is calling onClose; stop waits for it
	// reg is the connection's lasting registration, nil for a one-shot
	// watch (a socket that is not a clientConn).
	reg *peerReg

	// op is what ctl does to the socket; ctl is made once per pooled watch,
	// so that a watch allocates no closure for raw.Control.
	op    int
	ctl   func(fd uintptr)
	opErr error
	// closed is peek's answer: FIN or RST (true), or pipelined bytes or
	// nothing yet (then readable says which).
	closed, readable bool
}

var peerWatches = sync.Pool{New: func() any {
	p := &peerWatch{}
	p.ctl = p.control
	return p
}}

// watchRetry is how long the watcher waits before it tries again to set
// itself up after it failed: a shortage of descriptors passes, and hang-up
// detection must come back with them.
const watchRetry = time.Second

// epollCreate is epoll_create1(2); a variable, so that a test can make it
// fail as it does when the process is out of descriptors.
var epollCreate = unix.EpollCreate1

// ctl ops besides the EPOLL_CTL ones: peek at the socket, learn its
// number, and add it for good (a clientConn).
const (
	opPeek = -1 - iota
	opFD
	opRegister
)

func (p *peerWatch) control(fd uintptr) {
	// Raw system calls (rawsock): a watch is armed and stopped for every
	// request that can start a generation.
	if p.op == opPeek {
		n, errno := rawsock.Peek(fd)
		p.closed = n == 0 && errno == 0 || errno != 0 && errno != unix.EAGAIN && errno != unix.EINTR
		p.readable = n > 0
		return
	}
	p.fd = int32(fd)
	if p.op == opFD {
		return
	}
	op, events := p.op, uint32(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLONESHOT)
	if op == opRegister {
		op, events = unix.EPOLL_CTL_ADD, unix.EPOLLRDHUP|unix.EPOLLET
	}
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: int32(p.gen)}
	if errno := rawsock.EpollCtl(p.w.epfd, op, int(fd), &ev); errno != 0 {
		p.opErr = errno
	}
}

// do runs op on p's socket; false when the socket is closed already or the
// op failed.
func (p *peerWatch) do(op int) bool {
	p.op = op
	p.opErr = nil
	return p.raw.Control(p.ctl) == nil && p.opErr == nil
}

// watch starts watching conn: onClose is called, on the watcher's
// goroutine, once the client has closed its side. It returns nil, and
// watches nothing, for a connection that is not a socket (TLS, in-memory
// listeners) or when the watcher cannot run; stop on nil does nothing.
// The caller must call stop before conn can be closed or read again.
func (w *peerWatcher) watch(conn net.Conn, onClose func()) *peerWatch {
	raw := socketOf(conn)
	if raw == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.start() {
		return nil
	}
	p := peerWatches.Get().(*peerWatch)
	p.w, p.raw, p.onClose = w, raw, onClose
	if cc, ok := conn.(*clientConn); ok {
		return w.watchRegistered(p, &cc.peer)
	}
	w.gen++
	p.gen = w.gen
	// Registered under mu: an event that comes at once waits for byFD.
	if !p.do(unix.EPOLL_CTL_ADD) {
		p.release()
		return nil
	}
	w.byFD[p.fd] = p
	return p
}

// watchRegistered arms p on a client connection's lasting registration
// reg, registering the socket on its first watch. A hang-up that came
// while nothing was watched is confirmed with a peek and reported at once,
// on the caller's goroutine. w.mu is held.
func (w *peerWatcher) watchRegistered(p *peerWatch, reg *peerReg) *peerWatch {
	p.reg = reg
	if reg.gen == 0 {
		w.gen++
		p.gen = w.gen
		// Registered under mu: an event that comes at once waits for regs.
		if !p.do(opRegister) {
			p.release()
			return nil
		}
		reg.gen = p.gen
		w.regs[p.fd] = reg
	} else if p.gen = reg.gen; !p.do(opFD) {
		p.release()
		return nil // closed
	}
	if reg.hup {
		if p.do(opPeek) && p.closed {
			// Reported here, as the event's watch would have been: the
			// caller's request goes no further than it would then.
			p.onClose()
		}
		return p // not armed: nothing more comes
	}
	w.byFD[p.fd] = p
	return p
}

// start sets up the epoll instance and its goroutine on the first watch;
// false when they cannot run. w.mu is held.
func (w *peerWatcher) start() bool {
	if w.started || w.closed {
		return w.started && !w.closed
	}
	if !w.retryAt.IsZero() && time.Now().Before(w.retryAt) {
		return false
	}
	epfd, err := epollCreate(unix.EPOLL_CLOEXEC)
	if err != nil {
		w.retryAt = time.Now().Add(watchRetry)
		return false
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err == nil {
		err = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1})
		if err != nil {
			_ = unix.Close(wake)
		}
	}
	if err != nil {
		_ = unix.Close(epfd)
		w.retryAt = time.Now().Add(watchRetry)
		return false
	}
	w.epfd, w.wake, w.started = epfd, wake, true
	w.byFD = make(map[int32]*peerWatch)
	w.regs = make(map[int32]*peerReg)
	w.fired.L = &w.mu
	w.done = make(chan struct{})
	go w.run()
	return true
}

// stop ends the watch and returns once onClose is not running; onClose is
// not called after it. p is not used again.
func (p *peerWatch) stop() {
	if p == nil {
		return
	}
	w := p.w
	w.mu.Lock()
	w.disarm(p)
	for p.firing {
		w.fired.Wait()
	}
	w.mu.Unlock()
	p.release()
}

// disarm takes p out of the epoll set, if it is still armed. A socket
// closed without stop (by a shutdown) left the set on its close, and its
// number may be another watch's now: byFD says whether it is still p's,
// and Control fails on a closed socket. w.mu is held.
func (w *peerWatcher) disarm(p *peerWatch) {
	if w.byFD[p.fd] != p {
		return
	}
	delete(w.byFD, p.fd)
	if !w.closed && p.reg == nil {
		p.do(unix.EPOLL_CTL_DEL)
	}
}

func (p *peerWatch) release() {
	p.w, p.raw, p.onClose, p.reg = nil, nil, nil, nil
	peerWatches.Put(p)
}

// run waits for events until close writes wake.
func (w *peerWatcher) run() {
	defer close(w.done)
	var evs [64]unix.EpollEvent
	for {
		n, err := unix.EpollWait(w.epfd, evs[:], -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return // epfd is broken: watches end; write errors still end streams
		}
		for _, ev := range evs[:n] {
			if ev.Fd == -1 {
				return // close
			}
			w.readable(ev.Fd, uint32(ev.Pad))
		}
	}
}

// readable handles one event: the client closed (onClose), sent its next
// request (the watch stops; the bytes stay for fasthttp), or nothing yet
// (re-armed).
func (w *peerWatcher) readable(fd int32, gen uint32) {
	w.mu.Lock()
	p := w.byFD[fd]
	if p == nil || p.gen != gen {
		if reg := w.regs[fd]; reg != nil && reg.gen == gen {
			reg.hup = true // a client connection hung up between watches
		}
		w.mu.Unlock()
		return // stopped since the event came
	}
	if !p.do(opPeek) {
		w.disarm(p) // closed without stop
		w.mu.Unlock()
		return
	}
	if p.reg != nil && (p.closed || p.readable) {
		p.reg.hup = true // a hang-up is reported once: later watches peek
	}
	switch {
	case p.closed:
		w.disarm(p)
		p.firing = true
	case p.readable:
		w.disarm(p) // a pipelined request: the watch stops
	case p.reg == nil:
		p.do(unix.EPOLL_CTL_MOD) // woken for nothing: watch again
	}
	w.mu.Unlock()
	if p.firing {
		p.onClose()
		w.mu.Lock()
		p.firing = false
		w.fired.Broadcast()
		w.mu.Unlock()
	}
}

// close ends the watcher's goroutine; connections still watched are not
// watched any more. Watches made after it watch nothing.
func (w *peerWatcher) close() {
	w.mu.Lock()
	started := w.started && !w.closed
	w.closed = true
	w.mu.Unlock()
	if !started {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(w.wake, one[:])
	<-w.done
	_ = unix.Close(w.epfd)
	_ = unix.Close(w.wake)
}
