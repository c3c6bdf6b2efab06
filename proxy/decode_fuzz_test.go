package proxy

import "testing"

// FuzzDecodeHeld: whatever a client sends as a coded body, decoding it
// within a budget never holds more than the budget, holds what its output
// takes, and gives everything back.
func FuzzDecodeHeld(f *testing.F) {
	for k := codingGzip; k <= codingZstd; k++ {
		f.Add(uint8(k), encodeOne(nil, []byte(`{"model":"m","messages":[]}`), k))
		f.Add(uint8(k), encodeOne(nil, make([]byte, 300<<10), k))
	}
	f.Fuzz(func(t *testing.T, k uint8, src []byte) {
		cs := codings{n: 1}
		cs.list[0] = coding(k%4 + 1)
		b := bodyBudget{limit: 256 << 10}
		other := budgetShare{budget: &b} // another body in flight: no share is alone
		other.take(1)
		s := budgetShare{budget: &b}
		out, err := cs.decodeHeld(nil, src, 1<<20, &s)
		if used := b.used.Load(); used > b.limit {
			t.Fatalf("%d bytes of a %d-byte budget held", used, b.limit)
		}
		if err == nil && int64(cap(out)) > s.reserved {
			t.Fatalf("output of %d bytes, %d held for it", cap(out), s.reserved)
		}
		s.giveBack()
		other.giveBack()
		if used := b.used.Load(); used != 0 {
			t.Fatalf("%d bytes held after every share was given back", used)
		}
	})
}

// TestDecodeCompressible: bodies that compress far (an agent's history,
// 35 to 1) decode whole in every coding, framed with and without their
// size (a streaming zstd encoder says none), within a budget that holds
// them and under one that does not.
func TestDecodeCompressible(t *testing.T) {
	body := codexHistory(140)
	for _, enc := range []string{"gzip", "deflate", "br", "zstd"} {
		cs, _ := parseCodings([]byte(enc))
		for name, coded := range map[string][]byte{"stream": encodeAs(t, enc, body), "whole": encodeOne(nil, body, cs.list[0])} {
			b := bodyBudget{limit: 64 << 20}
			s := budgetShare{budget: &b}
			c, err := decodeBody(cs, coded, 64<<20, &s)
			if err != nil || string(c.decoded) != string(body) {
				t.Fatalf("%s, %s: %v; want the %d bytes back", enc, name, err, len(body))
			}
			c.release()
			s.giveBack()
			small := bodyBudget{limit: 64 << 10}
			other := budgetShare{budget: &small}
			other.take(1)
			s = budgetShare{budget: &small}
			if _, err := decodeBody(cs, coded, 64<<20, &s); err != errBodyMemory {
				t.Errorf("%s, %s in a 64 KiB budget: %v; want errBodyMemory", enc, name, err)
			}
		}
	}
}
