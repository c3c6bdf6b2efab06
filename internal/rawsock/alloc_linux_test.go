//go:build !race

package rawsock

import "testing"

// TestReadAheadAllocs: a read ahead allocates nothing of its own (the
// buffer is the caller's).
func TestReadAheadAllocs(t *testing.T) {
	d, a := tcpPair(t)
	c := Wrap(a).(*Conn)
	buf, one := make([]byte, 64), make([]byte, 1)
	get, put := func() []byte { return buf }, func([]byte) {}
	out := []byte("GET / HTTP/1.1\r\n\r\n")
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := d.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ReadAhead(one, get, put); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a read ahead allocates %v times; want 0", allocs)
	}
}
