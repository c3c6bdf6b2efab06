package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection, unwrapped.
func tcpPair(t testing.TB) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d.(*net.TCPConn), a.(*net.TCPConn)
}

// pattern is n bytes that tell a byte out of place from one in place.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7 / 3)
	}
	return b
}

// TestRoundTrip: what one end writes the other reads whole, whichever end
// is wrapped, at sizes up to several times what one system call moves.
func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		size int
	}{
		{name: "one byte", size: 1},
		{name: "an event", size: 300},
		{name: "larger than one system call moves (maxRW)", size: 200<<10 + 17},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, a := tcpPair(t)
			c := Wrap(a)
			want := pattern(tt.size)
			// wrapped writes, plain reads; then plain writes, wrapped reads.
			for _, dir := range []struct{ w, r net.Conn }{{c, d}, {d, c}} {
				errc := make(chan error, 1)
				go func() {
					n, err := dir.w.Write(want)
					if err == nil && n != len(want) {
						err = io.ErrShortWrite
					}
					errc <- err
				}()
				got := make([]byte, len(want))
				if _, err := io.ReadFull(dir.r, got); err != nil {
					t.Fatalf("read: %v", err)
				}
				if err := <-errc; err != nil {
					t.Fatalf("write: %v", err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("read %d bytes that differ from the %d written", len(got), len(want))
				}
			}
		})
	}
}

// errClass is what callers look at in a read's or write's outcome
// (proxy.isTimeout, errors.Is against io.EOF, net.ErrClosed, errnos, fasthttp's
// Timeout() checks).
type errClass struct {
	nilErr   bool
	eof      bool // err == io.EOF, unwrapped as net returns it
	op       string
	timeout  bool // net.Error with Timeout() true
	deadline bool // errors.Is os.ErrDeadlineExceeded
	closed   bool // errors.Is net.ErrClosed
	errno    syscall.Errno
}

func classify(err error) errClass {
	c := errClass{nilErr: err == nil, eof: err == io.EOF}
	var oe *net.OpError
	if errors.As(err, &oe) {
		c.op = oe.Op
	}
	var ne net.Error
	c.timeout = errors.As(err, &ne) && ne.Timeout()
	c.deadline = errors.Is(err, os.ErrDeadlineExceeded)
	c.closed = errors.Is(err, net.ErrClosed)
	var se *os.SyscallError
	if errors.As(err, &se) {
		c.errno, _ = se.Err.(syscall.Errno)
	}
	return c
}

// TestErrorsAsNet: every way a read or write ends looks to a caller
// exactly as it does from the socket's own methods.
func TestErrorsAsNet(t *testing.T) {
	big := make([]byte, 16<<20) // more than both socket buffers hold
	tests := []struct {
		name string
		do   func(c, peer net.Conn) error
		want errClass
	}{
		{
			name: "read",
			do: func(c, peer net.Conn) error {
				_, _ = peer.Write([]byte("x"))
				_, err := c.Read(make([]byte, 8))
				return err
			},
			want: errClass{nilErr: true},
		},
		{
			name: "read after the peer closed",
			do: func(c, peer net.Conn) error {
				peer.Close()
				_, err := c.Read(make([]byte, 8))
				return err
			},
			want: errClass{eof: true},
		},
		{
			name: "read past its deadline",
			do: func(c, _ net.Conn) error {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
				_, err := c.Read(make([]byte, 8))
				return err
			},
			want: errClass{op: "read", timeout: true, deadline: true},
		},
		{
			name: "read with a deadline already past",
			do: func(c, _ net.Conn) error {
				_ = c.SetReadDeadline(time.Unix(1, 0))
				_, err := c.Read(make([]byte, 8))
				return err
			},
			want: errClass{op: "read", timeout: true, deadline: true},
		},
		{
			name: "read of a closed connection",
			do: func(c, _ net.Conn) error {
				c.Close()
				_, err := c.Read(make([]byte, 8))
				return err
			},
			want: errClass{op: "read", closed: true},
		},
		{
			name: "read interrupted by close",
			do: func(c, _ net.Conn) error {
				time.AfterFunc(30*time.Millisecond, func() { c.Close() })
				_, err := c.Read(make([]byte, 8))
				return err
			},
			want: errClass{op: "read", closed: true},
		},
		{
			name: "read after the peer reset",
			do: func(c, peer net.Conn) error {
				_ = peer.(*net.TCPConn).SetLinger(0)
				peer.Close()
				_, err := c.Read(make([]byte, 8))
				return err
			},
			want: errClass{op: "read", errno: syscall.ECONNRESET},
		},
		{
			name: "write past its deadline, the peer not reading",
			do: func(c, _ net.Conn) error {
				_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
				n, err := c.Write(big)
				if n == 0 || n == len(big) {
					return errors.New("the write did not stop part way")
				}
				return err
			},
			want: errClass{op: "write", timeout: true, deadline: true},
		},
		{
			name: "write of a closed connection",
			do: func(c, _ net.Conn) error {
				c.Close()
				_, err := c.Write([]byte("x"))
				return err
			},
			want: errClass{op: "write", closed: true},
		},
		{
			name: "write after the peer reset",
			do: func(c, peer net.Conn) error {
				_ = peer.(*net.TCPConn).SetLinger(0)
				peer.Close()
				time.Sleep(10 * time.Millisecond) // the RST is in
				_, err := c.Write([]byte("x"))
				return err
			},
			want: errClass{op: "write", errno: syscall.ECONNRESET},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, wrap := range []bool{false, true} {
				d, a := tcpPair(t)
				c := net.Conn(a)
				if wrap {
					c = Wrap(a)
				}
				err := tt.do(c, d)
				if got := classify(err); got != tt.want {
					t.Errorf("wrapped %v: %v, classified %+v; want %+v", wrap, err, got, tt.want)
				}
			}
		})
	}
}

// TestWriteBuffers: buffers of any number and size, empty ones among them,
// arrive as one stream, and are consumed as net.Buffers' own write does.
func TestWriteBuffers(t *testing.T) {
	d, a := tcpPair(t)
	c := Wrap(a)
	parts := [][]byte{pattern(10), nil, pattern(150<<10 + 5), {}, pattern(1), pattern(3), pattern(4), pattern(5), pattern(600)}
	want := bytes.Join(parts, nil)
	v := net.Buffers(parts)
	errc := make(chan error, 1)
	go func() {
		n, err := WriteBuffers(c, &v)
		if err == nil && n != int64(len(want)) {
			err = io.ErrShortWrite
		}
		errc <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(d, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes read differ from the buffers written")
	}
	if len(v) != 0 {
		t.Errorf("%d buffers left after the write; want them consumed", len(v))
	}
}

// TestConcurrent: as a net.Conn, a wrapped connection takes reads and
// writes from several goroutines at once (run with -race).
func TestConcurrent(t *testing.T) {
	d, a := tcpPair(t)
	c := Wrap(a)
	const writers, each = 4, 200
	msg := pattern(100)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				if _, err := c.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	go func() { _, _ = io.Copy(d, d) }() // echo
	var mu sync.Mutex
	total := 0
	var rg sync.WaitGroup
	for range 2 {
		rg.Go(func() {
			buf := make([]byte, 64)
			for {
				n, err := c.Read(buf)
				mu.Lock()
				total += n
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	want := writers * each * len(msg)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		got := total
		mu.Unlock()
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %d bytes back; want %d", got, want)
		}
	}
	c.Close()
	rg.Wait()
}

// TestWrapNotTCP: what is not a TCP socket is returned as it is.
func TestWrapNotTCP(t *testing.T) {
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if got := Wrap(p); got != p {
		t.Errorf("Wrap(pipe) = %T; want the pipe itself", got)
	}
}

// TestPeek: a peek tells nothing yet, bytes waiting (and leaves them), the
// peer's FIN and its reset apart, without waiting.
func TestPeek(t *testing.T) {
	tests := []struct {
		name      string
		peer      func(peer *net.TCPConn)
		wantN     int
		wantErrno syscall.Errno
	}{
		{name: "nothing yet", peer: func(*net.TCPConn) {}, wantErrno: syscall.EAGAIN},
		{name: "bytes", peer: func(p *net.TCPConn) { _, _ = p.Write([]byte("next")) }, wantN: 1},
		{name: "FIN", peer: func(p *net.TCPConn) { p.Close() }},
		{name: "reset", peer: func(p *net.TCPConn) { _ = p.SetLinger(0); p.Close() }, wantErrno: syscall.ECONNRESET},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, a := tcpPair(t)
			tt.peer(d)
			time.Sleep(20 * time.Millisecond) // what the peer did is in
			raw, err := a.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var n int
			var errno syscall.Errno
			if err := raw.Control(func(fd uintptr) { n, errno = Peek(fd) }); err != nil {
				t.Fatal(err)
			}
			if n != tt.wantN || errno != tt.wantErrno {
				t.Errorf("Peek = %d, %v; want %d, %v", n, errno, tt.wantN, tt.wantErrno)
			}
			if tt.wantN > 0 {
				got := make([]byte, 4)
				if _, err := io.ReadFull(a, got); err != nil || string(got) != "next" {
					t.Errorf("read after Peek = %q, %v; want the bytes still there", got, err)
				}
			}
		})
	}
}
