package policy

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/loopguard/loopguard/internal/redistest"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/rs/zerolog"
)

func benchDecide(b *testing.B, p *Policy) {
	ctx := context.Background()
	loop, calm := loopReq(8, true), req{steps: 8}
	cases := []struct {
		name string
		r    req
		key  func(i int) string
	}{
		// A known session retrying its request: load, ladder, write.
		{"loop-known", loop, func(int) string { return "bench" }},
		// A fresh session per request: the first rung, a new entry.
		{"loop-new", loop, func(i int) string { return "bench-" + strconv.Itoa(i) }},
		// The common case: no loop in a known session.
		{"no-loop", calm, func(int) string { return "bench" }},
	}
	for _, c := range cases {
		v, t := c.r.verdict(), c.r.trajectory()
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := p.Decide(ctx, c.key(i), v, t, ModeEnforce); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkDecideMemory(b *testing.B) {
	benchDecide(b, New(DefaultConfig(), nil, zerolog.Nop()))
}

func BenchmarkDecideRedis(b *testing.B) {
	srv := redistest.Start(b)
	s, err := NewRedisStore(Config{RedisURL: srv.URL(0), TTL: time.Hour, StoreTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchDecide(b, New(DefaultConfig(), s, zerolog.Nop()))
}

func BenchmarkSessionKey(b *testing.B) {
	body := readFixture(b, "tools_longer.json")
	for _, c := range []struct {
		name   string
		header []byte
	}{{"header", []byte("sess-1")}, {"derived", nil}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_ = chatKey(c.header, body)
			}
		})
	}
}

// BenchmarkSessionLink is the store lookup a derived key costs on every
// request whose history has a first assistant turn (memory store).
func BenchmarkSessionLink(b *testing.B) {
	p := New(DefaultConfig(), nil, zerolog.Nop())
	id := Identify(wireapi.Chat, nil, readFixture(b, "tools_longer.json"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Session(ctx, id)
	}
}
