package inspect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchText returns about 64 KiB of healthy text (the healthy fixtures,
// each separated by a paragraph break, repeated as needed) or of a stream
// that degenerates after a short preamble.
func benchText(b *testing.B, degenerate bool) []byte {
	b.Helper()
	if degenerate {
		return []byte("Let me think about the schema. " +
			strings.Repeat("I'll write the schema first. Wait, I'll also write the .env file. Actually, I'll write the schema. ", 700))
	}
	paths, err := filepath.Glob(filepath.Join("testdata", "stream", "ok_*.txt"))
	if err != nil || len(paths) == 0 {
		b.Fatalf("no healthy fixtures: %v", err)
	}
	var sb strings.Builder
	for sb.Len() < 64<<10 {
		for _, p := range paths {
			raw, err := os.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			fx, err := parseStreamFixture(filepath.Base(p), raw)
			if err != nil {
				b.Fatal(err)
			}
			sb.Write(fx.text)
			sb.WriteString("\n\n")
		}
	}
	return []byte(sb.String())
}

// benchFeed feeds text in 16-byte deltas, the size servers typically send.
func benchFeed(b *testing.B, text []byte, wantFired bool) {
	d := NewDegeneration(StreamConfig{})
	// A fired detector ignores further input, so a degenerate stream is
	// only measured up to the cut, as in the proxy.
	fed := len(text)
	if at := firstFiring(StreamConfig{}, text); at > 0 {
		fed = int(at)
	}
	text = text[:fed]
	b.SetBytes(int64(fed))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d.Reset()
		for off := 0; off < len(text); off += 16 {
			d.Write(text[off:min(off+16, len(text))])
		}
	}
	b.StopTimer()
	if got := d.fired; got != wantFired {
		b.Fatalf("fired = %v; want %v", got, wantFired)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(fed), "ns/byte")
}

func BenchmarkDegenerationHealthy(b *testing.B) {
	benchFeed(b, benchText(b, false), false)
}

// BenchmarkDegenerationLocked measures the steady state of a locked period
// (the cost per byte once a loop is being counted) by raising the thresholds
// so that the loop never fires.
func BenchmarkDegenerationLocked(b *testing.B) {
	text := benchText(b, true)
	d := NewDegeneration(StreamConfig{Repeats: 1 << 20, ShapeRepeats: 1 << 20})
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		d.Reset()
		d.Write(text)
	}
	if d.fired {
		b.Fatal("fired with unreachable thresholds")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(text)), "ns/byte")
}

// BenchmarkDegenerationDegenerate measures a stream until it is cut.
func BenchmarkDegenerationDegenerate(b *testing.B) {
	benchFeed(b, benchText(b, true), true)
}
