package proxy

import (
	"io"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loopguard/loopguard/internal/rawsock"
)

// tcpPair returns the two ends of a loopback TCP connection: the dialed one
// first.
func tcpPair(t *testing.T) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}

func socketFD(t *testing.T, c net.Conn) int {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := raw.Control(func(fd uintptr) { n = int(fd) }); err != nil {
		t.Fatal(err)
	}
	return n
}

// fires returns an onClose that reports on a channel.
func fires() (onClose func(), fired chan struct{}) {
	fired = make(chan struct{}, 1)
	return func() { fired <- struct{}{} }, fired
}

func wantFired(t *testing.T, fired chan struct{}, what string) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(2 * time.Second):
		t.Fatalf("%s: onClose not called", what)
	}
}

func wantQuiet(t *testing.T, fired chan struct{}, what string) {
	t.Helper()
	select {
	case <-fired:
		t.Fatalf("%s: onClose called", what)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestPeerWatcherManyConnections: one goroutine watches every connection,
// and only those whose client closed (FIN or RST) are reported.
func TestPeerWatcherManyConnections(t *testing.T) {
	var w peerWatcher
	defer w.close()
	const n = 200
	fired := make(chan int, n)
	clients := make([]net.Conn, n)
	watches := make([]*peerWatch, n)
	g0 := runtime.NumGoroutine()
	for i := range n {
		c, s := tcpPair(t)
		clients[i] = c
		watches[i] = w.watch(s, func() { fired <- i })
		if watches[i] == nil {
			t.Fatalf("watch %d of a TCP connection = nil", i)
		}
	}
	if g := runtime.NumGoroutine() - g0; g > 1 {
		t.Errorf("%d goroutines started for %d watches; want 1", g, n)
	}
	want := map[int]bool{}
	for i := 0; i < n; i += 3 {
		if i%2 == 0 {
			_ = clients[i].(*net.TCPConn).SetLinger(0) // RST
		}
		clients[i].Close()
		want[i] = true
	}
	got := map[int]bool{}
	deadline := time.After(5 * time.Second)
	for len(got) < len(want) {
		select {
		case i := <-fired:
			got[i] = true
		case <-deadline:
			t.Fatalf("reported %d of %d closed clients", len(got), len(want))
		}
	}
	for _, p := range watches {
		p.stop()
	}
	if len(fired) > 0 {
		t.Errorf("client %d reported though it did not close", <-fired)
	}
	for i := range got {
		if !want[i] {
			t.Errorf("client %d reported though it did not close", i)
		}
	}
}

// TestPeerWatcherFDReuse: a socket closed without stop (a shutdown) leaves
// its number to the next one; the old watch's late stop must not disarm
// the new watch, and its onClose must not run for the new socket's client.
func TestPeerWatcherFDReuse(t *testing.T) {
	var w peerWatcher
	defer w.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, a := tcpPair(t)
	oldClose, oldFired := fires()
	old := w.watch(a, oldClose)
	fd := socketFD(t, a)
	a.Close()
	// The lowest free number goes to the next socket: the dialed end.
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bPeer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer bPeer.Close()
	if socketFD(t, b) != fd {
		t.Fatalf("socket number %d not reused (got %d); the test proves nothing", fd, socketFD(t, b))
	}
	newClose, newFired := fires()
	p := w.watch(b, newClose)
	if p == nil {
		t.Fatal("watch of the reused socket = nil")
	}
	old.stop()
	bPeer.Close()
	wantFired(t, newFired, "client of the reused socket closed")
	wantQuiet(t, oldFired, "old watch")
	p.stop()
}

// TestPeerWatcherPipelined: a client that sends its next request is not
// gone; the watch stops without consuming a byte, and a close after it is
// not reported (fasthttp reads the request and sees it).
func TestPeerWatcherPipelined(t *testing.T) {
	var w peerWatcher
	defer w.close()
	c, s := tcpPair(t)
	onClose, fired := fires()
	p := w.watch(s, onClose)
	const next = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
	if _, err := io.WriteString(c, next); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); armed(&w, p); {
		if time.Now().After(deadline) {
			t.Fatal("watch still armed after the client sent bytes")
		}
		time.Sleep(time.Millisecond)
	}
	c.Close()
	wantQuiet(t, fired, "client pipelined, then closed")
	p.stop()
	got, err := io.ReadAll(s)
	if string(got) != next || err != nil {
		t.Errorf("read after the watch = %q, %v; want %q", got, err, next)
	}
}

func armed(w *peerWatcher, p *peerWatch) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byFD[p.fd] == p
}

// TestPeerWatcherStop: nothing is reported after stop, stop waits for a
// running onClose, and a connection can be watched again (keep-alive).
func TestPeerWatcherStop(t *testing.T) {
	var w peerWatcher
	defer w.close()

	c, s := tcpPair(t)
	onClose, fired := fires()
	p := w.watch(s, onClose)
	p.stop()
	again, firedAgain := fires()
	p = w.watch(s, again) // the next request on the connection
	if p == nil {
		t.Fatal("second watch of a connection = nil")
	}
	c.Close()
	wantFired(t, firedAgain, "second watch, client closed")
	wantQuiet(t, fired, "stopped watch")
	p.stop()

	c, s = tcpPair(t)
	entered, release := make(chan struct{}), make(chan struct{})
	p = w.watch(s, func() { close(entered); <-release })
	c.Close()
	<-entered
	stopped := make(chan struct{})
	go func() { p.stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("stop returned while onClose was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-stopped
}

// TestPeerWatcherNotASocket: connections without a socket are not watched;
// stop on the nil watch does nothing.
func TestPeerWatcherNotASocket(t *testing.T) {
	var w peerWatcher
	defer w.close()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	p := w.watch(a, func() { t.Error("onClose called for a pipe") })
	if p != nil {
		t.Fatalf("watch of a pipe = %v; want nil", p)
	}
	p.stop()
	if w.started {
		t.Error("the watcher started for a connection it cannot watch")
	}
}

// TestPeerWatcherClose: close ends the goroutine (close waits for it);
// watches made before it can still be stopped, and later ones watch
// nothing.
func TestPeerWatcherClose(t *testing.T) {
	var w peerWatcher
	c, s := tcpPair(t)
	onClose, fired := fires()
	p := w.watch(s, onClose)
	closed := make(chan struct{})
	go func() { w.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("close did not return: the watcher's goroutine did not end")
	}
	c.Close()
	wantQuiet(t, fired, "closed watcher")
	p.stop()
	if q := w.watch(s, onClose); q != nil {
		t.Error("watch after close != nil")
	}
	w.close()
}

// TestPeerWatcherRegistered: a client connection of the server's own is
// registered once, on its first watch, and its later watches reuse the
// registration; a hang-up is reported while it is watched, and at its next
// watch when it came in between; a pipelined request is no hang-up.
func TestPeerWatcherRegistered(t *testing.T) {
	var w peerWatcher
	defer w.close()
	registration := func(cc *clientConn) peerReg {
		w.mu.Lock()
		defer w.mu.Unlock()
		return cc.peer
	}

	t.Run("once for every watch", func(t *testing.T) {
		_, s := tcpPair(t)
		cc := &clientConn{Conn: s}
		onClose, fired := fires()
		w.watch(cc, onClose).stop()
		first := registration(cc)
		if first.gen == 0 {
			t.Fatal("the first watch did not register the connection")
		}
		for range 3 {
			p := w.watch(cc, onClose)
			if !armed(&w, p) {
				t.Fatal("a later watch is not armed")
			}
			p.stop()
		}
		if got := registration(cc); got != first {
			t.Errorf("registration %+v after more watches; want %+v, the first", got, first)
		}
		wantQuiet(t, fired, "client still there")
	})

	t.Run("hang-up while watched", func(t *testing.T) {
		c, s := tcpPair(t)
		cc := &clientConn{Conn: s}
		onClose, fired := fires()
		w.watch(cc, onClose).stop() // registered by an earlier request
		p := w.watch(cc, onClose)
		c.Close()
		wantFired(t, fired, "client closed during a later watch")
		p.stop()
	})

	t.Run("hang-up between watches", func(t *testing.T) {
		c, s := tcpPair(t)
		cc := &clientConn{Conn: s}
		onClose, fired := fires()
		w.watch(cc, onClose).stop()
		c.Close()
		for deadline := time.Now().Add(2 * time.Second); !registration(cc).hup; {
			if time.Now().After(deadline) {
				t.Fatal("the hang-up between watches was not noted")
			}
			time.Sleep(time.Millisecond)
		}
		wantQuiet(t, fired, "nothing watched")
		p := w.watch(cc, onClose)
		wantFired(t, fired, "the next watch after a hang-up")
		p.stop()
	})

	t.Run("pipelined, then closed", func(t *testing.T) {
		c, s := tcpPair(t)
		cc := &clientConn{Conn: s}
		onClose, fired := fires()
		p := w.watch(cc, onClose)
		const next = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
		if _, err := io.WriteString(c, next); err != nil {
			t.Fatal(err)
		}
		c.Close()
		wantQuiet(t, fired, "client pipelined, then closed")
		p.stop()
		got, err := io.ReadAll(s)
		if string(got) != next || err != nil {
			t.Errorf("read after the watch = %q, %v; want %q", got, err, next)
		}
	})

	t.Run("socket number reused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		_, a := tcpPair(t)
		old := &clientConn{Conn: a}
		oldClose, oldFired := fires()
		w.watch(old, oldClose).stop()
		fd := socketFD(t, a)
		a.Close() // leaves the epoll set with the socket
		// Lower numbers may be free too: connect until one gets a's.
		var b, bPeer net.Conn
		for range 64 {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			peer, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()
			if socketFD(t, c) == fd {
				b, bPeer = c, peer
				break
			}
			if socketFD(t, peer) == fd {
				b, bPeer = peer, c
				break
			}
		}
		if b == nil {
			t.Fatalf("socket number %d not reused; the test proves nothing", fd)
		}
		cc := &clientConn{Conn: b}
		newClose, newFired := fires()
		p := w.watch(cc, newClose)
		if p == nil || registration(cc).gen == registration(old).gen {
			t.Fatal("the new connection on the reused number is not registered for itself")
		}
		bPeer.Close()
		wantFired(t, newFired, "client of the reused socket closed")
		wantQuiet(t, oldFired, "old connection")
		p.stop()
	})
}

// TestClientConnReadAhead: fasthttp's one-byte read of a kept-alive
// connection's next request reads the request ahead, and the reads after
// it get the rest, in order, before the socket is read again.
func TestClientConnReadAhead(t *testing.T) {
	d, a := tcpPair(t)
	cc := &clientConn{Conn: rawsock.Wrap(a)}
	first := "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
	second := strings.Repeat("x", 10<<10) // past the read-ahead buffer
	if _, err := io.WriteString(d, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	one := make([]byte, 1)
	if n, err := cc.Read(one); n != 1 || err != nil || one[0] != 'P' {
		t.Fatalf("one-byte read = %d %q, %v; want 1 \"P\"", n, one[:n], err)
	}
	if len(cc.ahead) != len(first)-1 {
		t.Fatalf("%d bytes read ahead; want the request's %d", len(cc.ahead), len(first)-1)
	}
	go io.WriteString(d, second)
	got := []byte("P")
	buf := make([]byte, 16<<10)
	for len(got) < len(first)+len(second) {
		n, err := cc.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != first+second {
		t.Errorf("read %d bytes out of order", len(got))
	}
	if cc.aheadBuf != nil {
		t.Error("the read-ahead buffer is held after its bytes were read")
	}
}
