package proxy

import (
	"bufio"
	"net"
	"testing"
	"unsafe"

	"github.com/loopguard/loopguard/internal/rawsock"
	"github.com/loopguard/loopguard/sse"
)

func TestHotLinesAdd(t *testing.T) {
	tests := []struct {
		name  string
		sizes []uintptr
		want  int
	}{
		{"a byte is a line", []uintptr{1}, 1},
		{"a line", []uintptr{64}, 1},
		{"a byte over", []uintptr{65}, 2},
		{"a large object, its first lines", []uintptr{4096}, hotObjectLines},
		{"no more than the list holds", []uintptr{4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096}, hotLinesMax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h hotLines
			mem := make([]byte, 4096)
			for _, size := range tt.sizes {
				h.add(unsafe.Pointer(&mem[0]), size)
			}
			if h.n != tt.want {
				t.Fatalf("%d lines listed; want %d", h.n, tt.want)
			}
			for i, p := range h.at[:h.n] {
				if off := uintptr(p) - uintptr(unsafe.Pointer(&mem[0])); off%cacheLine != 0 || off >= 4096 {
					t.Errorf("line %d at offset %d", i, off)
				}
			}
			mem[0] = 7
			h.load()
			if h.sum == 0 {
				t.Error("load read none of the lines")
			}
		})
	}
	var h hotLines
	h.add(nil, 64)
	if h.n != 0 {
		t.Errorf("nil listed %d lines", h.n)
	}
}

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

	t.Logf("%d lines listed", st.rl.hot.n)
	listed := map[unsafe.Pointer]bool{}
	for _, p := range st.rl.hot.at[:st.rl.hot.n] {
		listed[p] = true
	}
	for name, p := range map[string]unsafe.Pointer{
		"relay": unsafe.Pointer(&st.rl), "stats": unsafe.Pointer(&st.stats),
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
