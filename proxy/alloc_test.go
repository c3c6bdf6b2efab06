//go:build !race

package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
	"github.com/valyala/fasthttp"
)

// TestObserveEventAllocs holds inline inspection of a healthy stream to zero
// allocations per event in the steady state.
func TestObserveEventAllocs(t *testing.T) {
	o, events := observerAndEvents(t)
	out := make([]byte, 0, 4096)
	i := 64
	if n := testing.AllocsPerRun(1000, func() {
		out, _ = o.event(&events[i%len(events)], out[:0])
		i++
	}); n != 0 {
		t.Errorf("inspecting one stream event allocates %.1f times; want 0", n)
	}
}

// TestRelayEventAllocs holds the relay of a stream (read, scan for the
// event's end, write, flush; inspection on and off) to zero allocations per
// event: a run relays a whole stream of 64 events, one per read, and the
// reader, the observer and the writer are reused across runs as they are
// reused across the events of one stream.
func TestRelayEventAllocs(t *testing.T) {
	o, events := observerAndEvents(t)
	for _, tt := range []struct {
		name string
		obs  responseObserver
	}{
		{"inspection off", nil},
		{"inspection on", o},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const perStream = 64
			src := &eventSource{events: events[64:]}
			rl := streamRelay{obs: tt.obs, rd: sse.NewReader(src, 0)}
			w := bufio.NewWriterSize(io.Discard, streamBodyBuf)
			var st relayStats
			relayed := 0
			if n := testing.AllocsPerRun(200, func() {
				src.left = perStream
				rl.rd.Reset(src)
				st = relayStats{}
				if _, stop := rl.relay(w, src, time.Now(), &st, false); stop != nil || st.readErr != nil {
					t.Fatalf("relay = %v, %v; want the stream relayed to its end", stop, st.readErr)
				}
				relayed += st.events
			}); n != 0 {
				t.Errorf("relaying a stream of %d events allocates %.1f times; want 0", perStream, n)
			}
			if relayed != 201*perStream {
				t.Errorf("relayed %d events; want %d", relayed, 201*perStream)
			}
		})
	}
}

// TestStreamEventAllocs holds a stream relayed through the proxy, one
// event a read as a model's pace brings them, to no allocation per event
// over the whole path: the upstream socket's reads within the pump, the
// chunked body, the relay and inspection, the client's writes. Within the
// pump, a read that finds nothing returns at once, and the idle timeout's
// check of that (isTimeout) allocated an error target every event. The
// first events, before the count, warm what the runtime fills once (type
// assertion caches, pools).
func TestStreamEventAllocs(t *testing.T) {
	const n, warm = 400, 16
	var chunks [][]byte
	for _, ev := range proseEvents()[:warm+n] {
		chunks = append(chunks, fmt.Appendf(nil, "%x\r\n%s\r\n", len(ev.Raw), ev.Raw))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	paced, finish := make(chan struct{}), make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for line := ""; line != "\r\n" && err == nil; line, err = br.ReadString('\n') {
		}
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"))
		for i, chunk := range chunks[:warm] { // the response's headers go with the first
			if i%2 == 0 {
				time.Sleep(time.Millisecond) // a model's pace; the others come at once
			}
			_, _ = c.Write(chunk)
		}
		<-paced
		for _, chunk := range chunks[warm:] {
			_, _ = c.Write(chunk)
			time.Sleep(200 * time.Microsecond)
		}
		<-finish
		_, _ = c.Write([]byte("0\r\n\r\n"))
	}()
	_, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = "http://" + ln.Addr().String()
		c.Log.Level = "error"
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64<<10)
	for events := 0; events < warm; {
		m, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		events += bytes.Count(buf[:m], []byte("\n\n"))
	}
	time.Sleep(50 * time.Millisecond) // the relay waiting
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	close(paced)
	for events := 0; events < n; {
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d events: %v", events, err)
		}
		events += bytes.Count(buf[:m], []byte("\n\n"))
	}
	runtime.ReadMemStats(&after)
	close(finish)
	// None per event: it was one an event.
	if mallocs := after.Mallocs - before.Mallocs; mallocs > n/40 {
		t.Errorf("relaying %d events allocated %d times; want none per event", n, mallocs)
	}
}

// TestForwardAllocs bounds what loopguard allocates for a request it does
// not inspect: one on a path it passes through, and a chat request in
// policy mode off. Each request makes the whole trip over loopback; what
// the client and the upstream allocate is measured through a bare fasthttp
// proxy in front of the same upstream and taken off.
func TestForwardAllocs(t *testing.T) {
	up := benchUpstream(t)
	body := chatBody(4<<10, false)
	bare := requestAllocs(t, bareProxy(t, up), "/v1/chat/completions", body)
	for _, tt := range []struct {
		name, path string
		mode       policy.Mode
		want       float64
	}{
		// 4 and 13 now (each plus one for a pool that a collection
		// emptied): 10 and 25 when written, 21 and 35 before the
		// pass-through lost its Date reader, URI, limit reader, exchange
		// and error targets, 4 and 20 before mode off lost its store
		// deadline (a context and a timer), the heap copy of its plan and
		// of the body's session fields, and the allocations of its derived
		// session key's hash.
		{"pass-through", "/v1/embeddings", policy.ModeEnforce, 5},
		{"chat, mode off", "/v1/chat/completions", policy.ModeOff, 14},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, base := startProxy(t, func(c *Config) {
				c.Upstream.URL = up
				c.Log.Level = "error"
				c.Policy.Mode = tt.mode
			})
			if n := requestAllocs(t, base, tt.path, body) - bare; n > tt.want {
				t.Errorf("a forwarded request allocates %.1f times; want at most %.0f", n, tt.want)
			} else {
				t.Logf("%.1f allocations per request (the client's and the upstream's, %.1f, taken off)", n, bare)
			}
		})
	}
}

// requestAllocs is the allocations of the whole process per request of
// body to base+path, pools warm.
func requestAllocs(t *testing.T, base, path string, body []byte) float64 {
	client := &fasthttp.HostClient{Addr: strings.TrimPrefix(base, "http://"), MaxConns: 1}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	do := func() { postOK(t, client, req, resp, base+path, body) }
	for range 100 {
		do()
	}
	return testing.AllocsPerRun(500, do)
}
