package proxy

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

// TestNewChunkedBody: a chunked body gets a small reader of its own and
// reads first what the pooled reader held past the headers, which may be
// reused at once; trailer lines longer than that reader are read whole.
func TestNewChunkedBody(t *testing.T) {
	long := "X-Long: " + strings.Repeat("x", 3*chunkedReadBuf) + "\r\n"
	for _, tt := range []struct {
		name, in, body string
	}{
		{"a chunk held, one on the connection", "3\r\nabc\r\n" + "2\r\nde\r\n0\r\n\r\n", "abcde"},
		{"a chunk held, the last on the connection", "3\r\nabc\r\n0\r\n\r\n", "abc"},
		{"long trailer line", "3\r\nabc\r\n0\r\n" + long + "\r\n", "abc"},
		// The long line's tail, a bare CRLF after a full buffer, is not
		// the blank line that ends the trailer.
		{"long trailer line then another", "3\r\nabc\r\n0\r\n" + long + "X-T: 1\r\n\r\n", "abc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			head := "HTTP/1.1 200 OK\r\n\r\n"
			pooled := bufio.NewReaderSize(strings.NewReader(head+tt.in[:8]), 4<<10)
			if _, err := pooled.Discard(len(head)); err != nil {
				t.Fatal(err)
			}
			if _, err := pooled.Peek(8); err != nil { // the headers' read brought the first chunk
				t.Fatal(err)
			}
			c := newChunkedBody(pooled, strings.NewReader(tt.in[8:]))
			pooled.Reset(strings.NewReader("garbage")) // given back and reused
			if c.br.Size() != chunkedReadBuf {
				t.Errorf("reader of %d bytes; want %d", c.br.Size(), chunkedReadBuf)
			}
			got, err := io.ReadAll(c)
			if string(got) != tt.body || err != nil {
				t.Errorf("read %q, %v; want %q, nil", got, err, tt.body)
			}
		})
	}
}
