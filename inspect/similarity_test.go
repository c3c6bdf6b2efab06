package inspect

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// levenshteinRef is the dynamic-programming edit distance levenshtein
// replaced.
func levenshteinRef(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cur := row[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			row[j] = min(row[j]+1, row[j-1]+1, prev+cost)
			prev = cur
		}
	}
	return row[len(b)]
}

var levenshteinCases = []struct {
	a, b string
	want int
}{
	{"", "", 0},
	{"", "abc", 3},
	{"abc", "", 3},
	{"kitten", "sitting", 3},
	{"foo", "fo0", 1},
	{`{"path":"a.go"}`, `{"path":"b.go"}`, 1},
	{"abcdef", "fedcba", 6},
	{strings.Repeat("a", 64), strings.Repeat("a", 63) + "b", 1},
	{strings.Repeat("ab", 32), strings.Repeat("ba", 32), 2},
	{strings.Repeat("x", 64), "", 64},
}

func TestLevenshtein(t *testing.T) {
	for _, tt := range levenshteinCases {
		if got := levenshtein(tt.a, tt.b); got != tt.want {
			t.Errorf("levenshtein(%q, %q) = %d; want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// FuzzLevenshtein holds the bit-vector distance to the matrix one.
func FuzzLevenshtein(f *testing.F) {
	for _, tt := range levenshteinCases {
		f.Add(tt.a, tt.b)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 64 {
			a = a[:64]
		}
		if got, want := levenshtein(a, b), levenshteinRef(a, b); got != want {
			t.Fatalf("levenshtein(%q, %q) = %d; want %d", a, b, got, want)
		}
	})
}

func TestSimilarity(t *testing.T) {
	long := "the parser splits each record on commas and trims the fields"
	tests := []struct {
		name   string
		a, b   string
		lo, hi float64 // want lo <= similarity <= hi
	}{
		{"equal", `{"path":"a.go"}`, `{"path":"a.go"}`, 1, 1},
		{"both empty", "", "", 1, 1},
		{"one character changed in a short string", "foo", "fo0", 0.66, 0.67},
		{"words in another order", `{"a":"x","b":"y"}`, `{"b":"y","a":"x"}`, 1, 1},
		{"case ignored", "FooBar", "foobar", 1, 1},
		{"one word changed in a long text: 10 words of 12", long + " again", long + " twice", 0.83, 0.84},
		{"unrelated", "grep -rn retry_budget src/", "cat README.md", 0, 0.3},
		{"non-ASCII bytes belong to words", long + " café", long + " crème", 0.83, 0.84},
	}
	in := &inspection{w: &work{}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := in.similarity(tt.a, tt.b)
			if got < tt.lo || got > tt.hi {
				t.Errorf("similarity(%q, %q) = %.3f; want %.2f..%.2f", tt.a, tt.b, got, tt.lo, tt.hi)
			}
			if back := in.similarity(tt.b, tt.a); back != got {
				t.Errorf("similarity(%q, %q) = %.3f; want %.3f, as the other way round", tt.b, tt.a, back, got)
			}
		})
	}
}

// TestSimilarKeepsPattern: similar decides similarity(a, b) >= thr, and
// a levenshtein pattern kept from one comparison to the next (b the same
// string, then another) gives the distance a fresh one gives.
func TestSimilarKeepsPattern(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	words := []string{"foo", "fo0", "FOO", "src/a.go", "src/b.go", `"path":`, "{", "}", " ", "café", "-n", "grep", "x"}
	text := func() string {
		var b strings.Builder
		for n := rng.IntN(12); n > 0; n-- {
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	in := &inspection{w: &work{}}
	for i := 0; i < 3000; i++ {
		b := text()
		for j := 0; j < 5; j++ {
			a := text()
			if len(a) <= 64 && len(b) <= 64 && a != b {
				in.w.lev.set(b)
				if got, want := in.w.lev.distance(a), levenshteinRef(b, a); got != want {
					t.Fatalf("kept pattern %q: distance to %q %d; want %d", b, a, got, want)
				}
			}
			for _, thr := range []float64{0, 0.5, 0.6, 0.8, 0.9, 1} {
				if got, want := in.similar(a, b, thr), in.similarity(a, b) >= thr; got != want {
					t.Fatalf("similar(%q, %q, %v) = %v; want %v", a, b, thr, got, want)
				}
			}
		}
	}
}
