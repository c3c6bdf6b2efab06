package main

import (
	"net"
	"testing"

	"github.com/loopguard/loopguard/internal/rawsock"
)

// TestAcceptRaw: a client's connection is read and written with raw system
// calls (rawsock), and still leaves the tracker's set when closed.
func TestAcceptRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &connTracker{Listener: ln, open: map[net.Conn]struct{}{}}
	defer l.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.(*trackedConn).Conn; got == nil {
		t.Fatal("accepted connection wraps nothing")
	} else if _, ok := got.(*rawsock.Conn); !ok {
		t.Errorf("accepted connection wraps %T; want *rawsock.Conn", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := l.closeAll(); n != 0 {
		t.Errorf("%d connections tracked after the only one closed; want 0", n)
	}
}
