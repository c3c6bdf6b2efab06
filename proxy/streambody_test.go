package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// writeLog records a streamBody's writes to the connection, one entry a
// gathering write.
type writeLog struct {
	writes []string
	err    error
}

func (l *writeLog) WriteBuffers(v *net.Buffers) (int64, error) {
	var b []byte
	for _, p := range *v {
		b = append(b, p...)
	}
	*v = (*v)[len(*v):]
	l.writes = append(l.writes, string(b))
	if l.err != nil {
		return 0, l.err
	}
	return int64(len(b)), nil
}

// TestStreamBody: the header goes with the first write, each write is one
// chunk (HTTP/1.1) or goes as it is (HTTP/1.0), each in one write, and the
// body ends with the last chunk, with the header if nothing was written.
func TestStreamBody(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\n\r\n"
	burst := strings.Repeat("b", batchMax+1)
	for _, tt := range []struct {
		name    string
		chunked bool
		writes  []string
		want    []string
	}{
		{"chunks", true, []string{"data: a\n\n", "", burst},
			[]string{head + "9\r\ndata: a\n\n\r\n", fmt.Sprintf("%x\r\n%s\r\n", len(burst), burst), "0\r\n\r\n"}},
		{"no chunk", true, nil, []string{head + "0\r\n\r\n"}},
		{"HTTP/1.0", false, []string{"data: a\n\n", "data: b\n\n"}, []string{head + "data: a\n\n", "data: b\n\n"}},
		{"HTTP/1.0, no byte", false, nil, []string{head}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log writeLog
			b := &streamBody{conn: &log, head: []byte(head), chunked: tt.chunked}
			for _, p := range tt.writes {
				if n, err := b.Write([]byte(p)); n != len(p) || err != nil {
					t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(p))
				}
			}
			if err := b.end(); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(log.writes, tt.want) {
				t.Errorf("writes %q; want %q", log.writes, tt.want)
			}
		})
	}
	t.Run("failed write", func(t *testing.T) {
		gone := errors.New("gone")
		b := &streamBody{conn: &writeLog{err: gone}, head: []byte(head), chunked: true}
		if n, err := b.Write([]byte("data: a\n\n")); n != 0 || err != gone {
			t.Errorf("Write = %d, %v; want 0, the connection's error", n, err)
		}
	})
}

// TestStreamBurstThroughServer: events an upstream sent ahead go to the
// client joined in chunks, byte for byte as they came.
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
	conn := dialProxy(t, base)
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
	// The burst came in reads of many events each: they go out joined,
	// not a chunk an event.
	if one := len(events.String()) / 60; largest < 10*one {
		t.Errorf("largest chunk %d bytes; want the burst's events joined, at least 10 of %d bytes in one", largest, one)
	}
}

// dialProxy opens a connection to the proxy at base, closed when the test
// ends, whose reads and writes fail after 10 s.
func dialProxy(t *testing.T, base string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn
}

// streamUpstream answers every request on its path: a stream of two events
// where the path holds "stream", else a JSON body.
func streamUpstream(t *testing.T) *rawUpstream {
	return startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		for {
			req, ok := u.readRequest(br)
			if !ok {
				return
			}
			answer := rawJSON
			if strings.Contains(req.URL.Path, "stream") {
				answer = rawStreamHead + "f\r\ndata: {\"a\":1}\n\n\r\n" + "e\r\ndata: [DONE]\n\n\r\n" + "0\r\n\r\n"
			}
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
}

// readAnswer reads one response off br: its status line and headers, and
// its body, whole (chunked or of a length).
func readAnswer(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading an answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading an answer's body: %v", err)
	}
	return resp, string(body)
}

// TestStreamConnectionGoesOn: a stream's connection, which loopguard took
// over from fasthttp to write the stream, serves the client's next
// requests after it: one sent after the stream, one pipelined behind the
// stream's request (read with it, before the stream), and another stream.
func TestStreamConnectionGoesOn(t *testing.T) {
	up := streamUpstream(t)
	_, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
	conn := dialProxy(t, base)
	br := bufio.NewReader(conn)
	post := func(path string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	}
	wantStream := "data: {\"a\":1}\n\ndata: [DONE]\n\n"
	for i, tt := range []struct {
		name  string
		send  string
		want  []string // the bodies of the answers, in order
		chunk bool     // the first answer is chunked
	}{
		{"a stream", post("/v1/stream"), []string{wantStream}, true},
		{"a request after it", post("/v1/chat"), []string{`{"ok":true}`}, false},
		{"a request pipelined behind a stream", post("/v1/stream") + post("/v1/chat"), []string{wantStream, `{"ok":true}`}, true},
		{"another stream", post("/v1/stream"), []string{wantStream}, true},
	} {
		if _, err := io.WriteString(conn, tt.send); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		for j, want := range tt.want {
			resp, body := readAnswer(t, br)
			if resp.StatusCode != http.StatusOK || body != want {
				t.Errorf("%s, answer %d: %d %q; want 200 %q", tt.name, j, resp.StatusCode, body, want)
			}
			if chunked := len(resp.TransferEncoding) > 0; j == 0 && chunked != tt.chunk {
				t.Errorf("%s: chunked %v; want %v", tt.name, chunked, tt.chunk)
			}
			if resp.Close {
				t.Fatalf("%s (step %d): the answer closes the connection", tt.name, i)
			}
		}
	}
}

// TestStreamConnectionClose: a client that says Connection: close gets it
// said back on the stream, and the connection closed after it; an idle
// connection after a stream closes after the idle timeout, not the
// request's read timeout.
func TestStreamConnectionClose(t *testing.T) {
	up := streamUpstream(t)
	_, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = up.url()
		c.Server.ReadTimeout = time.Minute
		c.Server.IdleTimeout = 300 * time.Millisecond
	})
	for _, tt := range []struct {
		name   string
		header string
	}{
		{"client asks", "Connection: close\r\n"},
		{"idle after the stream", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialProxy(t, base)
			fmt.Fprintf(conn, "POST /v1/stream HTTP/1.1\r\nHost: x\r\n%sContent-Length: 2\r\n\r\n{}", tt.header)
			br := bufio.NewReader(conn)
			resp, _ := readAnswer(t, br)
			if resp.Close != (tt.header != "") {
				t.Errorf("Connection: close %v; want %v", resp.Close, tt.header != "")
			}
			// The server closes: the read ends (EOF) well before the
			// connection's deadline, a minute's read timeout included.
			if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("read after the stream = %d, %v; want the connection closed (EOF)", n, err)
			}
		})
	}
}

// TestShutdownAfterStream: a connection a stream gave back to fasthttp,
// waiting for the client's next request, is closed at once by a shutdown,
// as an idle connection is, not after fasthttp's 5 s.
func TestShutdownAfterStream(t *testing.T) {
	up := streamUpstream(t)
	srv, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.url() })
	conn := dialProxy(t, base)
	_, _ = io.WriteString(conn, "POST /v1/stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	br := bufio.NewReader(conn)
	if resp, _ := readAnswer(t, br); resp.Close {
		t.Fatal("the stream's answer closes the connection; want it kept alive")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v; want the kept-alive connection closed at once", err)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("read after the shutdown = %d, %v; want the connection closed (EOF)", n, err)
	}
}

// closingOnHeader closes every client connection when the upstream's
// header comes, before fasthttp can hand the stream's connection over.
type closingOnHeader struct {
	responseObserver
	srv *Server
}

func (o *closingOnHeader) header(status int, h *fasthttp.ResponseHeader) {
	o.srv.CloseConnections()
	o.responseObserver.header(status, h)
}

// TestStreamNotHandedOver: when fasthttp closes a stream's connection
// instead of handing it over (here: it was closed under it), the stream
// still ends as one whose client left: its upstream connection is closed,
// so the model stops, and a shutdown does not wait for it.
func TestStreamNotHandedOver(t *testing.T) {
	upstreamGone := make(chan struct{})
	up := startRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int) {
		if _, ok := u.readRequest(br); !ok {
			return
		}
		_, _ = io.WriteString(c, rawStreamHead+"f\r\ndata: {\"a\":1}\n\n\r\n")
		// The model goes on until its connection closes.
		_, _ = io.Copy(io.Discard, c)
		close(upstreamGone)
	})
	cfg := DefaultConfig()
	cfg.Upstream.URL = up.url()
	srv, base := observedProxy(t, cfg, zerolog.Nop(), func(s *Server) responseObserver {
		return &closingOnHeader{newAnswerObserver(s.pipeline, &plan{api: chatAPI, requestFacts: requestFacts{stream: true}}, nil), s}
	})
	conn := dialProxy(t, base)
	_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n{\"stream\":true}")
	select {
	case <-upstreamGone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's connection stayed open: the stream was never ended")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v; want no stream left to wait for", err)
	}
}
