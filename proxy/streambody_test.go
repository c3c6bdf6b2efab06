package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sinkLog records the writes of a chunkWriter's two sinks: which one, and
// the chunk, for the connection as framed or not.
type sinkLog struct {
	name string
	log  *[]string
	err  error
}

func (s sinkLog) Write(p []byte) (int, error) {
	entry := fmt.Sprintf("%s %d", s.name, len(p))
	if s.name == "conn" {
		size, rest, _ := strings.Cut(string(p), "\r\n")
		n, err := strconv.ParseInt(size, 16, 64)
		if data, ok := strings.CutSuffix(rest, "\r\n"); err == nil && ok && int64(len(data)) == n {
			entry = fmt.Sprintf("conn chunk of %d", n)
		} else {
			entry = "conn unframed"
		}
	}
	*s.log = append(*s.log, entry)
	if s.err != nil {
		return 0, s.err
	}
	return len(p), nil
}

// WriteBuffers writes v as one Write, as one writev does.
func (s sinkLog) WriteBuffers(v *net.Buffers) (int64, error) {
	var b []byte
	for _, p := range *v {
		b = append(b, p...)
	}
	*v = (*v)[len(*v):]
	n, err := s.Write(b)
	return int64(n), err
}

// TestChunkWriter: once a chunk went through fasthttp's writer (which sent
// the response header with it), every chunk up to a burst's size goes to the
// connection framed, in one write; a larger one goes through fasthttp's
// writer.
func TestChunkWriter(t *testing.T) {
	small, burst, huge := strings.Repeat("s", 100), strings.Repeat("b", 5000), strings.Repeat("h", batchMax+1)
	fits := strings.Repeat("f", serverWriteBuf-chunkFraming)
	for _, tt := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"burst first", []string{burst, small, burst}, "chunks 5000, conn chunk of 100, conn chunk of 5000"},
		{"burst after a chunk", []string{small, burst, burst}, "chunks 100, conn chunk of 5000, conn chunk of 5000"},
		{"one that fits the write buffer", []string{small, fits}, fmt.Sprintf("chunks 100, conn chunk of %d", len(fits))},
		{"larger than a burst", []string{small, huge}, fmt.Sprintf("chunks 100, chunks %d", len(huge))},
		{"largest burst", []string{small, huge[:batchMax]}, fmt.Sprintf("chunks 100, conn chunk of %d", batchMax)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			w := &chunkWriter{chunks: sinkLog{name: "chunks", log: &log}, conn: sinkLog{name: "conn", log: &log}}
			for _, p := range tt.writes {
				if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
					t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(p))
				}
			}
			if got := strings.Join(log, ", "); got != tt.want {
				t.Errorf("writes %s; want %s", got, tt.want)
			}
		})
	}
	t.Run("failed write", func(t *testing.T) {
		var log []string
		gone := errors.New("gone")
		w := &chunkWriter{chunks: sinkLog{name: "chunks", log: &log}, conn: sinkLog{name: "conn", log: &log, err: gone}, sent: true}
		if n, err := w.Write([]byte(burst)); n != 0 || err != gone {
			t.Errorf("Write = %d, %v; want 0, the connection's error", n, err)
		}
	})
}

// TestStreamBurstThroughServer: events an upstream sent ahead go to the
// client as one chunk larger than the server's write buffer, framed as
// fasthttp frames the others, byte for byte as they came.
func TestStreamBurstThroughServer(t *testing.T) {
	chunk := func(data string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(data), data) }
	first := "data: {\"first\":true}\n\n"
	var burst, events strings.Builder
	for i := range 60 {
		ev := fmt.Sprintf("data: {\"i\":%d,\"text\":%q}\n\n", i, strings.Repeat("w", 80))
		burst.WriteString(chunk(ev))
		events.WriteString(ev)
	}
	release := make(chan struct{})
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		if _, ok := u.readRequest(br); !ok {
			return
		}
		_, _ = io.WriteString(c, rawStreamHead+chunk(first))
		<-release
		_, _ = io.WriteString(c, burst.String()+"0\r\n\r\n")
	})
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "POST /v1/stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the response header: %v", err)
		}
		if line == "\r\n" {
			break
		}
	}
	// The chunks, as framed on the wire.
	var body strings.Builder
	largest := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading a chunk's size: %v", err)
		}
		size, err := strconv.ParseInt(strings.TrimSuffix(line, "\r\n"), 16, 64)
		if err != nil || !strings.HasSuffix(line, "\r\n") {
			t.Fatalf("chunk size line %q", line)
		}
		data := make([]byte, size+2)
		if _, err := io.ReadFull(br, data); err != nil || string(data[size:]) != "\r\n" {
			t.Fatalf("chunk of %d bytes ends %q, %v; want its data, then CRLF", size, data[max(0, len(data)-2):], err)
		}
		if size == 0 {
			break
		}
		body.Write(data[:size])
		largest = max(largest, int(size))
		if body.String() == first {
			close(release) // the first event came through alone: send the burst
		}
	}
	if want := first + events.String(); body.String() != want {
		t.Errorf("body of %d bytes differs from the upstream's %d", body.Len(), len(want))
	}
	if largest+chunkFraming <= serverWriteBuf {
		t.Errorf("largest chunk %d bytes; want the burst in one larger than the server's write buffer (%d)", largest, serverWriteBuf)
	}
}
