//go:build !race

package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestOpenStreamFootprint holds many inspected streams open through the
// proxy and measures what each costs in goroutines, heap and stacks: the
// figure that decides how many agents one replica serves. The upstream and
// the clients share the process; their own share, measured by the same
// streams going to the upstream directly, is subtracted.
func TestOpenStreamFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("holds hundreds of open streams to measure them: skipped under -short")
	}
	const n = 300
	for _, tt := range []struct {
		name string
		body string
	}{
		{"one message", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		// An agent's request carries its history: the stream must not
		// keep it (it did, 128 KiB of buffer for this one).
		{"a 100 KB history", `{"model":"m","stream":true,"messages":[{"role":"system","content":"` +
			strings.Repeat("You are an agent. ", 100<<10/18) + `"},{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Whatever else the process still does (goroutines of earlier
			// tests winding down, on a busy machine) adds to one
			// measurement, never takes away: the least of three is the
			// streams' own.
			var goroutines, heap, stack float64
			for attempt := range 3 {
				direct := openStreamsFootprint(t, n, false, tt.body)
				via := openStreamsFootprint(t, n, true, tt.body)
				g, h, st := via.goroutines-direct.goroutines, via.heap-direct.heap, via.stack-direct.stack
				if attempt == 0 || h+st < heap+stack {
					goroutines, heap, stack = g, h, st
				}
				if heap+stack <= streamMemoryBudget {
					break
				}
			}
			t.Logf("per open stream: %.1f goroutines, %.1f KiB heap, %.1f KiB stacks", goroutines, heap/1024, stack/1024)
			// A goroutine of the stream's own writes it, on the connection
			// fasthttp handed over (streambody.go); one goroutine of the
			// server's watches every client for leaving
			// (clientwatch_linux.go).
			if goroutines > 1.1 {
				t.Errorf("%.1f goroutines per open stream; want 1", goroutines)
			}
			// The heap: the 16 KiB request buffer released while streaming
			// (ReduceMemoryUsage) and the request's body let go of
			// (relayStream), no request context, pipe, copy buffers or
			// fasthttp write buffer (streambody.go), a 1 KiB reader of the upstream's chunked body (the pooled
			// 4 KiB one goes back after the headers, chunked.go), the chat
			// observer; the degeneration detector holds its ring and k-gram
			// table and makes its loose-cycle table only when the text
			// could need it (inspect/loose.go). The stack: the stream's
			// goroutine holds only the relay's frames, none of fasthttp's
			// or of the chat pipeline's, which ran on the connection's.
			if heap+stack > streamMemoryBudget {
				t.Errorf("%.1f KiB per open stream (%.1f heap, %.1f stack); want at most %d KiB",
					(heap+stack)/1024, heap/1024, stack/1024, streamMemoryBudget>>10)
			}
		})
	}
}

// streamMemoryBudget is what an inspected open stream may hold in the
// proxy, heap and stack together (docs/performance.md: many open streams).
// A stream relayed on fasthttp's connection goroutine, under its frames and
// with the stack the chat pipeline grew, goes over it, as does one that
// keeps the request's context (streambody.go).
const streamMemoryBudget = 24 << 10

type footprint struct{ goroutines, heap, stack float64 }

func openStreamsFootprint(t *testing.T, n int, viaProxy bool, body string) footprint {
	hold := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						break
					}
				}
				ev := `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Reading the file now. "},"finish_reason":null}]}` + "\n\n"
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev)
				<-hold
			}()
		}
	}()
	target := ln.Addr().String()
	if viaProxy {
		_, base := startProxy(t, func(c *Config) {
			c.Upstream.URL = "http://" + target
			c.Log.Level = "error"
		})
		target = strings.TrimPrefix(base, "http://")
	}
	// Two collections: what earlier tests left in sync.Pools survives the
	// first (as the pools' victims) and would be freed during the
	// measurement, making it read low (by 30 KiB a stream after the rest
	// of the package's tests).
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	conns := make([]net.Conn, 0, n)
	defer func() {
		close(hold)
		for _, c := range conns {
			c.Close()
		}
		ln.Close()
		<-done
	}()
	for range n {
		c, err := net.Dial("tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var got []byte
		one := make([]byte, 1)
		for !strings.Contains(string(got), "Reading the file now") {
			if _, err := io.ReadFull(c, one); err != nil {
				t.Fatalf("stream: %v after %q", err, got)
			}
			got = append(got, one[0])
		}
	}
	time.Sleep(100 * time.Millisecond) // every stream written and waiting
	runtime.GC()
	runtime.ReadMemStats(&after)
	return footprint{
		goroutines: float64(runtime.NumGoroutine()-g0) / float64(n),
		heap:       float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n),
		stack:      float64(int64(after.StackInuse)-int64(before.StackInuse)) / float64(n),
	}
}
