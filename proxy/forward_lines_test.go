package proxy

import (
	"bufio"
	"net"
	"testing"
	"unsafe"

	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/loopguard/loopguard/sse"
)

// TestListLines: the list of an open stream names every object relaying
// an event goes through, from the upstream's socket to the client's.
func TestListLines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	client := rawsock.Wrap(accepted).(*rawsock.Conn)
	upstream := rawsock.Wrap(dialed).(*rawsock.Conn)

	tc := &trackedConn{Conn: upstream}
	cb := newChunkedBody(bufio.NewReader(nil), tc)
	ub := &upstreamBody{conn: tc, raw: tc, r: cb}
	obs := observerPool.Get().(*answerObserver)
	chat := chatStreams.Get().(*chatStream)
	obs.answer = chat
	defer func() { obs.answer = nil; observerPool.Put(obs); chatStreams.Put(chat) }()
	st := &openStream{ub: ub, conn: &clientConn{Conn: client}, body: &streamBody{},
		rl: streamRelay{obs: obs, rd: sse.NewReader(ub, 1<<20)}}
	w := bufio.NewWriterSize(nil, streamBodyBuf)
	st.listLines(w)

	t.Logf("%d lines listed", st.rl.hot.Len())
	listed := map[unsafe.Pointer]bool{}
	for _, p := range st.rl.hot.Lines() {
		listed[p] = true
	}
	for name, p := range map[string]unsafe.Pointer{
		"relay": unsafe.Pointer(&st.rl), "relay step": unsafe.Pointer(&st.rl.step), "stats": unsafe.Pointer(&st.stats),
		"writer": unsafe.Pointer(w), "body": unsafe.Pointer(st.body), "client socket": unsafe.Pointer(client),
		"upstream body": unsafe.Pointer(ub), "upstream conn": unsafe.Pointer(tc), "upstream socket": unsafe.Pointer(upstream),
		"chunked body": unsafe.Pointer(cb), "chunked reader": unsafe.Pointer(cb.own), "event reader": unsafe.Pointer(st.rl.rd),
		"observer": unsafe.Pointer(obs), "answer": unsafe.Pointer(chat),
	} {
		if !listed[p] {
			t.Errorf("%s not listed", name)
		}
	}
}
