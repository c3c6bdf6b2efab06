package inspect

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// looseText is a stream that says something new for preamble words and
// then cycles through a pool of period words, each pass changing about two
// words in changeEvery (a word of the pool swapped in, a word dropped) and,
// when novelEvery > 0, saying one new word every novelEvery words.
func looseText(seed uint64, preamble, period, passes, changeEvery, novelEvery int) string {
	rng := rand.New(rand.NewPCG(seed, 19))
	var b strings.Builder
	n := 0
	word := func(w string) {
		b.WriteString(w)
		n++
		if n%13 == 0 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
		if novelEvery > 0 && n%novelEvery == 0 {
			fmt.Fprintf(&b, "value%d ", 100000+n)
		}
	}
	for i := range preamble {
		word(fmt.Sprintf("intro%d", i))
	}
	pool := make([]string, period)
	for i := range pool {
		pool[i] = fmt.Sprintf("w%c%c%d", 'a'+rng.IntN(26), 'a'+rng.IntN(26), i)
	}
	for range passes {
		for i := 0; i < period; i++ {
			switch r := rng.IntN(changeEvery); {
			case r == 0:
				word(pool[rng.IntN(period)]) // swapped
			case r == 1:
				// dropped
			default:
				word(pool[i])
			}
		}
	}
	return b.String()
}

// tableText is n markdown rows of one shape: a fixed status column and an
// id, a name and an amount that change with every row.
func tableText(n int) string {
	rng := rand.New(rand.NewPCG(7, 19))
	names := []string{"Alice Smith", "Bob Novak", "Carmen Silva", "Dmitri Chen", "Emeka Khan", "Fatima Rossi"}
	var b strings.Builder
	b.WriteString("| id | name | status | region | amount |\n|---|---|---|---|---|\n")
	for i := range n {
		fmt.Fprintf(&b, "| %d | %s | active | eu-west | %d.%02d |\n", 4100+i, names[rng.IntN(len(names))],
			rng.IntN(900), rng.IntN(100))
	}
	return b.String()
}

func TestDegenerationLooseCycles(t *testing.T) {
	paragraph := looseText(3, 0, 150, 1, 1<<30, 0)
	tests := []struct {
		name string
		give string
		want bool
	}{
		{"120-word cycle, one word in 20 changed", looseText(1, 60, 120, 8, 40, 0), true},
		{"40-word cycle, one word in 20 changed", looseText(2, 30, 40, 20, 40, 0), true},
		{"250-word cycle, one word in 30 changed", looseText(4, 60, 250, 6, 60, 0), true},
		{"120-word cycle, one word in 10 changed: too loose", looseText(1, 60, 120, 8, 20, 0), false},
		{"a 150-word paragraph four times", paragraph + paragraph + paragraph + paragraph, true},
		{"a 150-word paragraph twice", paragraph + paragraph, false},
		{"the cycle says something new every 40 words", looseText(5, 60, 120, 8, 40, 40), false},
		{"rows of one shape with new values", tableText(200), false},
		{"the same cycle inside a code fence", "```text\n" + looseText(1, 60, 120, 8, 40, 0), false},
		{"the same cycle as list items", strings.ReplaceAll(looseText(1, 60, 120, 8, 40, 0), ".\n", ".\n- "), false},
		{"1100-word cycle: longer than the table remembers", looseText(6, 0, 1100, 3, 1<<30, 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A period limit below the phrases keeps the phrase rule out of
			// exact repeats, so that the loose rule is what is tested.
			cfg := StreamConfig{MaxPhrase: 20}
			d := NewDegeneration(cfg)
			got := d.Write([]byte(tt.give))
			if got != tt.want {
				t.Fatalf("Write(%d bytes) = %v (%+v); want %v", len(tt.give), got, d.Detection().Evidence, tt.want)
			}
			if !got {
				return
			}
			det := d.Detection()
			if det.Score != scoreLoose || det.Evidence.Count < det.Evidence.Threshold || det.Evidence.Threshold != 3 {
				t.Errorf("Detection() = %+v; want score %v, Count >= Threshold = 3", det, scoreLoose)
			}
			if n := len(strings.Fields(det.Evidence.Element)); n < looseSpan-1 || n > looseSpan {
				t.Errorf("Element %q has %d words; want the %d-word span", det.Evidence.Element, n, looseSpan)
			}
			at := firstFiring(cfg, []byte(tt.give))
			// The element shows line breaks as spaces.
			if off := d.Offset(); off <= 0 || off >= at ||
				!strings.Contains(strings.ReplaceAll(tt.give[off:at], "\n", " "), det.Evidence.Element) {
				t.Errorf("Offset() = %d, fired at %d: the window does not hold the element %q", off, at, det.Evidence.Element)
			}
			t.Logf("fired at byte %d of %d, offset %d, %q x%d", at, len(tt.give), d.Offset(), det.Evidence.Element, det.Evidence.Count)
		})
	}
}

// TestDegenerationLooseWindowConfig checks that LooseWindow is the knob it
// claims to be: a larger window waits for more repeated words.
func TestDegenerationLooseWindowConfig(t *testing.T) {
	text := []byte(looseText(1, 60, 120, 8, 40, 0))
	var prev int64
	for _, w := range []int{64, 128, 192, 256} {
		at := firstFiring(StreamConfig{MaxPhrase: 20, LooseWindow: w}, text)
		if at < 0 || at <= prev {
			t.Errorf("LooseWindow %d: fired at %d; want a firing later than %d (smaller window)", w, at, prev)
		}
		prev = at
	}
}

// newEagerDegeneration returns a detector as it was before its tables were
// made small: the loose-cycle table exists from the start and the k-gram
// table holds 16-bit positions.
func newEagerDegeneration(cfg StreamConfig) *Degeneration {
	d := NewDegeneration(cfg)
	d.loose.grow()
	d.table8, d.table16 = nil, new([1 << degTableBits]uint16)
	return d
}

// TestDegenerationLazyAndEagerAgree holds the lazy loose-cycle table and
// the 8-bit k-gram positions to the promise that they change no decision:
// on the stream fixtures and the loose cycles above, split every way, a
// lazy and an eager detector answer every Write alike and report the same
// offset and detection. The corpus must take both lazy paths: the precheck
// making the table before a cycle fires, and text that never needs it.
func TestDegenerationLazyAndEagerAgree(t *testing.T) {
	texts := lazyTexts(t)
	configs := []StreamConfig{
		{},
		{MaxPhrase: 20},
		{MaxPhrase: 20, Window: 1 << 16},
		{MaxPhrase: 20, Window: 1 << 16, LooseWindow: 32},
		{Window: 256, MaxPhrase: 64},
	}
	grewEarly, stayedLazy := 0, 0
	for ci, cfg := range configs {
		for name, text := range texts {
			for _, n := range []int{1, 5, 16, 333, len(text)} {
				lazy, eager := NewDegeneration(cfg), newEagerDegeneration(cfg)
				for off := 0; off < len(text); off += n {
					p := []byte(text[off:min(off+n, len(text))])
					if got, want := lazy.Write(p), eager.Write(p); got != want {
						t.Fatalf("config %d, %s, split by %d: lazy Write at %d = %v; eager %v", ci, name, n, off, got, want)
					}
				}
				if lazy.Offset() != eager.Offset() || !reflect.DeepEqual(lazy.Detection(), eager.Detection()) {
					t.Fatalf("config %d, %s, split by %d: lazy %d %+v; eager %d %+v", ci, name, n,
						lazy.Offset(), lazy.Detection(), eager.Offset(), eager.Detection())
				}
				switch {
				case lazy.loose.t == nil && len(text) > 1<<10:
					stayedLazy++
				case lazy.loose.t != nil && lazy.pos < int64(len(lazy.buf))-1:
					grewEarly++
				}
			}
		}
	}
	if grewEarly == 0 || stayedLazy == 0 {
		t.Errorf("the precheck made the table early %d times, and %d long texts needed none; want both", grewEarly, stayedLazy)
	}
}

// TestLoosePrecheckFilledAsFed holds the precheck's late start to its
// promise: filled from the ring once the first window of words is there,
// it holds after every Write what a precheck fed every word from the
// first holds, and makes the table at the same byte.
func TestLoosePrecheckFilledAsFed(t *testing.T) {
	filled := 0
	for ci, cfg := range []StreamConfig{{}, {MaxPhrase: 20, Window: 1 << 16, LooseWindow: 32}, {Window: 256, MaxPhrase: 64}} {
		for name, text := range lazyTexts(t) {
			for _, n := range []int{1, 16, 333} {
				late, fed := NewDegeneration(cfg), NewDegeneration(cfg)
				fed.loose.fed = true
				for off := 0; off < len(text); off += n {
					p := []byte(text[off:min(off+n, len(text))])
					if got, want := late.Write(p), fed.Write(p); got != want {
						t.Fatalf("config %d, %s, split by %d: Write at %d = %v; fed from the first word %v", ci, name, n, off, got, want)
					}
					if (late.loose.t == nil) != (fed.loose.t == nil) {
						t.Fatalf("config %d, %s, split by %d: after Write at %d the table is made: %v; fed from the first word: %v",
							ci, name, n, off, late.loose.t != nil, fed.loose.t != nil)
					}
					if late.loose.t != nil || !late.loose.fed {
						continue
					}
					filled++
					if *late.loose.pre != *fed.loose.pre || late.loose.suspect != fed.loose.suspect {
						t.Fatalf("config %d, %s, split by %d: after Write at %d the precheck differs from one fed from the first word",
							ci, name, n, off)
					}
				}
			}
		}
	}
	if filled == 0 {
		t.Error("no precheck was filled")
	}
}

// lazyTexts is the corpus that holds the lazy tables to the eager ones: the
// stream fixtures and loose cycles of every kind.
func lazyTexts(t *testing.T) map[string]string {
	t.Helper()
	paragraph := looseText(3, 0, 150, 1, 1<<30, 0)
	texts := map[string]string{
		"loose 120":          looseText(1, 60, 120, 8, 40, 0),
		"loose 40":           looseText(2, 30, 40, 20, 40, 0),
		"loose 250":          looseText(4, 60, 250, 6, 60, 0),
		"too loose":          looseText(1, 60, 120, 8, 20, 0),
		"paragraph x4":       paragraph + paragraph + paragraph + paragraph,
		"paragraph x2":       paragraph + paragraph,
		"new every 40":       looseText(5, 60, 120, 8, 40, 40),
		"table":              tableText(200),
		"cycle in a fence":   "```text\n" + looseText(1, 60, 120, 8, 40, 0),
		"1100-word cycle":    looseText(6, 0, 1100, 3, 1<<30, 0),
		"one pass of prose":  looseText(7, 0, 600, 1, 1<<30, 0),
		"phrase then cycles": strings.Repeat("Let me check the config again. ", 12) + looseText(1, 60, 120, 8, 40, 0),
	}
	for _, fx := range loadStreamFixtures(t) {
		texts[fx.name] = string(fx.text)
	}
	return texts
}
