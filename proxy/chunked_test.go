package proxy

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/rawsock"
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

// segmentReader returns its segments one a read (a read with less room
// gets the segment's head, the next read the rest): a connection's reads
// as the upstream's writes arrive.
// With pumped, it has nothing (rawsock.ErrWouldBlock) before each segment,
// as a pumped connection between two of the upstream's writes.
type segmentReader struct {
	segs   []string
	pumped bool
	had    bool // the read before returned ErrWouldBlock
}

func (r *segmentReader) Read(p []byte) (int, error) {
	if len(r.segs) == 0 {
		return 0, io.EOF
	}
	if r.had = !r.had; r.pumped && r.had {
		return 0, rawsock.ErrWouldBlock
	}
	n := copy(p, r.segs[0])
	if r.segs[0] = r.segs[0][n:]; r.segs[0] == "" {
		r.segs = r.segs[1:]
	}
	return n, nil
}

// TestChunkedBodyBurst: a chunked body reads through a burst reader while
// the upstream is ahead (a read filled its own reader), through its own
// small one otherwise, and gives the burst reader back when the upstream
// no longer is, and at the end; the bytes are the same either way.
func TestChunkedBodyBurst(t *testing.T) {
	chunk := func(i int) string {
		data := fmt.Sprintf("data: %03d %s\n\n", i, strings.Repeat("x", 180))
		return fmt.Sprintf("%x\r\n%s\r\n", len(data), data)
	}
	var all []string // 60 chunks, then the last one
	var want strings.Builder
	for i := range 60 {
		all = append(all, chunk(i))
		want.WriteString(all[i][strings.Index(all[i], "\n")+1 : len(all[i])-2])
	}
	all = append(all, "0\r\n\r\n")
	for _, tt := range []struct {
		name string
		segs []string
		// the readers' sizes in the order they were used, repeats
		// dropped, and the one read through after the end
		want string
	}{
		{"at pace: a chunk a read", all, "1024, own after the end"},
		{"ahead all along", []string{strings.Join(all, "")}, "1024 4096, own after the end"},
		{"ahead, then at pace", append([]string{strings.Join(all[:30], "")}, all[30:]...), "1024 4096 1024, own after the end"},
		{"at pace, ahead, at pace", append(append(append([]string{}, all[:10]...), strings.Join(all[10:40], "")), all[40:]...),
			"1024 4096 1024, own after the end"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newChunkedBody(bufio.NewReader(strings.NewReader("")), &segmentReader{segs: slices.Clone(tt.segs)})
			var got []byte
			var sizes []string
			p := make([]byte, 1<<10) // as the SSE reader reads
			for {
				n, err := c.Read(p)
				got = append(got, p[:n]...)
				if s := strconv.Itoa(c.br.Size()); n > 0 && (len(sizes) == 0 || sizes[len(sizes)-1] != s) {
					sizes = append(sizes, s)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			end := "burst after the end"
			if c.br == c.own {
				end = "own after the end"
			}
			if g := strings.Join(sizes, " ") + ", " + end; g != tt.want {
				t.Errorf("readers %s; want %s", g, tt.want)
			}
			if string(got) != want.String() {
				t.Errorf("read %q; want %q", got, want.String())
			}
		})
	}
}
