package inspect

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzDegeneration feeds arbitrary text, split at arbitrary points, and
// checks the invariants the proxy relies on: no panic, the ring never grows,
// the result does not depend on how the text was split nor on when the
// loose-cycle table was made, and a finding is well formed and points
// inside the text.
func FuzzDegeneration(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "stream", "*.txt"))
	for i, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if fx, err := parseStreamFixture(filepath.Base(p), raw); err == nil {
			f.Add(fx.text, uint8(i*7+1))
		}
	}
	f.Add([]byte("```\n|a|\n- x\n"), uint8(1))
	f.Fuzz(func(t *testing.T, text []byte, step uint8) {
		cfg := StreamConfig{Window: 256, MaxPhrase: 64} // small ring: exercise wrap-around
		whole := NewDegeneration(cfg)
		split := NewDegeneration(cfg)
		ring := len(whole.buf)
		gotWhole := whole.Write(text)
		gotSplit := false
		n := int(step%64) + 1
		for off := 0; off < len(text); off += n {
			gotSplit = split.Write(text[off:min(off+n, len(text))])
		}
		if gotWhole != gotSplit || whole.Offset() != split.Offset() ||
			!reflect.DeepEqual(whole.Detection(), split.Detection()) {
			t.Fatalf("whole: %v %d %+v; split by %d: %v %d %+v", gotWhole, whole.Offset(), whole.Detection(),
				n, gotSplit, split.Offset(), split.Detection())
		}
		eager := newEagerDegeneration(cfg)
		if got := eager.Write(text); got != gotWhole || eager.Offset() != whole.Offset() ||
			!reflect.DeepEqual(eager.Detection(), whole.Detection()) {
			t.Fatalf("lazy: %v %d %+v; eager: %v %d %+v", gotWhole, whole.Offset(), whole.Detection(),
				got, eager.Offset(), eager.Detection())
		}
		if len(whole.buf) != ring || cap(whole.buf) != ring {
			t.Fatalf("ring grew from %d to %d", ring, cap(whole.buf))
		}
		if !gotWhole {
			return
		}
		det := whole.Detection()
		if off := whole.Offset(); off < 0 || off >= int64(len(text)) {
			t.Fatalf("Offset() = %d outside the %d-byte text", off, len(text))
		}
		if det.Category != TokenDegeneration || det.Score <= 0.9 || det.Score > 1 ||
			det.Evidence.Count < det.Evidence.Threshold || len(det.Evidence.Element) > degElemMax+len("…") {
			t.Fatalf("malformed detection %+v", det)
		}
	})
}
