package proxy

import (
	"testing"

	"github.com/loopguard/loopguard/internal/rawsock"
)

// TestUpstreamConnRaw: an upstream connection is read and written with raw
// system calls (rawsock): a read an event, for every open stream.
func TestUpstreamConnRaw(t *testing.T) {
	dialed, _ := tcpPair(t)
	var reg connRegistry
	tc, ok := reg.track(dialed).(*trackedConn)
	if !ok {
		t.Fatal("track did not return a *trackedConn")
	}
	if _, ok := tc.Conn.(*rawsock.Conn); !ok {
		t.Errorf("tracked connection wraps %T; want *rawsock.Conn", tc.Conn)
	}
	if tc.raw == nil {
		t.Error("the tracked connection lost its socket for peerClosed")
	}
}
