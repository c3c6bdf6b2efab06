//go:build !race

package rawsock

import "testing"

// TestAllocs: a read and a write allocate nothing: the relay makes one of
// each per stream event, and holds its per-event allocations at zero.
func TestAllocs(t *testing.T) {
	d, a := tcpPair(t)
	c := Wrap(a)
	out, in := []byte("data: x\n\n"), make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Read(in); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("a read and a write on a wrapped connection allocate %v times; want 0", allocs)
	}
}
