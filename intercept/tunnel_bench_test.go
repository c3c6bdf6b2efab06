package intercept

import (
	"io"
	"net"
	"testing"
	"time"
)

// downloadServer serves size bytes to each connection, then closes it;
// at rate bytes a second when rate is not 0, as a link of that speed
// would.
func downloadServer(b *testing.B, size, rate int) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	chunk := make([]byte, 64<<10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				start := time.Now()
				for sent := 0; sent < size; {
					n := min(size-sent, len(chunk))
					if _, err := c.Write(chunk[:n]); err != nil {
						return
					}
					sent += n
					if rate > 0 {
						time.Sleep(time.Until(start.Add(time.Duration(sent) * time.Second / time.Duration(rate))))
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkTunnelDownload downloads from a loopback server directly and
// through a tunnel of the proxy: the tunnel's cost is the gap between the
// two. Over loopback at full speed the copy is all the work there is, and
// a tunnel carries each byte twice; at 1 Gbit/s, a fast link, the tunnel
// must keep up with the link.
func BenchmarkTunnelDownload(b *testing.B) {
	_, proxyURL := startProxy(b, []string{"chatgpt.com"}, nil)
	buf := make([]byte, 256<<10)
	for _, link := range []struct {
		name       string
		size, rate int
	}{
		{"loopback", 64 << 20, 0},
		{"1Gbps", 16 << 20, 125_000_000},
	} {
		addr := downloadServer(b, link.size, link.rate)
		for _, route := range []struct {
			name string
			dial func() net.Conn
		}{
			{"direct", func() net.Conn {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				return c
			}},
			{"tunnel", func() net.Conn {
				c, status := connect(b, proxyURL, addr, true)
				if status != 200 {
					b.Fatalf("CONNECT: %d", status)
				}
				return c
			}},
		} {
			b.Run(link.name+"/"+route.name, func(b *testing.B) {
				b.SetBytes(int64(link.size))
				b.ReportAllocs()
				for b.Loop() {
					c := route.dial()
					n, err := io.CopyBuffer(io.Discard, c, buf)
					c.Close()
					if err != nil || n != int64(link.size) {
						b.Fatalf("read %d bytes, %v; want %d", n, err, link.size)
					}
				}
			})
		}
	}
}
