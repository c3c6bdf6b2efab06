package proxy

import (
	"bufio"
	"net"
	"testing"
	"unsafe"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// TestListLines: the list of an open stream names every object relaying
// an event goes through, from the upstream's socket to the client's.
func TestListLines(t *testing.T) {
	dialed, accepted := tcpPair(t)
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

	// The text detector comes with the answer's first text.
	n := st.rl.hot.Len()
	obs.watch.content[0] = nil // a pooled observer may have had one
	st.rl.listDetector()
	if st.rl.hot.Len() != n || st.rl.listedDetector {
		t.Fatalf("a detector not made yet listed")
	}
	d := inspect.NewDegeneration(inspect.StreamConfig{})
	obs.watch.content[0] = d
	defer func() { obs.watch.content[0] = nil }()
	st.rl.listDetector()
	if lines := st.rl.hot.Lines(); !st.rl.listedDetector || len(lines) == n || lines[n] != unsafe.Pointer(d) {
		t.Errorf("the detector not listed once made")
	}
}

// TestChunkWriterSocket: a stream's chunks go to the client's socket
// itself, which the stream's hot lines list, not through a wrapper of
// their own; a connection that is not a socket gets one.
func TestChunkWriterSocket(t *testing.T) {
	_, accepted := tcpPair(t)
	sock := rawsock.Wrap(accepted)
	var ctx fasthttp.RequestCtx
	ctx.Init2(&clientConn{Conn: sock}, nil, false)
	if b := setBodyWriter(&ctx, nil); b.cw.conn != sock.(buffersWriter) {
		t.Errorf("chunks go to %T; want the socket", b.cw.conn)
	}
	pipe, other := net.Pipe()
	defer pipe.Close()
	defer other.Close()
	ctx.Init2(pipe, nil, false)
	if b := setBodyWriter(&ctx, nil); b.cw.conn != (connBuffers{pipe}) {
		t.Errorf("chunks to a pipe go to %T; want connBuffers", b.cw.conn)
	}
}
