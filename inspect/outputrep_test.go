package inspect

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestOutputRepetition(t *testing.T) {
	const plan = "I will now write the unit tests for the parser and the renderer modules."
	// Goose #9640: a local model planning the same two files over and over.
	const schema = "I'll write the schema first. Wait, I'll also write the .env file with the database URL. Actually, I'll write the schema."
	// Three plans, each one word from the first: reworded, not new.
	texts := []string{
		"Next I will update the config loader so that it reads settings.toml first, then merges the environment variables on top, validates the port range and the timeout values, and only then starts the server with the merged settings, so that a bad value fails fast at start-up instead of at the first request.",
		"Next I will update the config loader so that it reads settings.toml first, then merges the environment variables on top, validates the port number and the timeout values, and only then starts the server with the merged settings, so that a bad value fails fast at start-up instead of at the first request.",
		"Next I will change the config loader so that it reads settings.toml first, then merges the environment variables on top, validates the port range and the timeout values, and only then starts the server with the merged settings, so that a bad value fails fast at start-up instead of at the first request.",
	}
	in := &inspection{w: &work{}}
	simLast, simTwo := in.textSimilarity(texts[2], texts[1]), min(in.textSimilarity(texts[2], texts[1]), in.textSimilarity(texts[2], texts[0]))
	if simLast >= 0.95 {
		t.Fatalf("texts[2] is %.2f similar to texts[1]: the output_similar_two cases need less than output_similar_last", simLast)
	}
	// narrate adds three turns with the same long narration beside
	// different calls.
	narrate := func(text string) func() *conv {
		return func() *conv {
			c := newConv(sysPrompt, "Fix the flaky test")
			for _, f := range []string{"a.py", "b.py", "c.py"} {
				c.call(text, "read_file", map[string]any{"path": f}, "x = 1")
			}
			return c
		}
	}
	long := "I have looked at the failing test and the fixture it uses. The fixture opens a socket on a fixed port, " +
		"so two runs in parallel collide. I will read the remaining modules to find where the port is chosen, " +
		"then make it ask the kernel for a free one and pass it down to the server under test."
	runFamily(t, OutputRepetition, []familyCase{
		// The loop it exists for: the same text again (OpenHands' monologue).
		{name: "monologue", give: []string{"bash:ls=>a", "say:" + plan, "user:continue", "say:" + plan, "user:continue", "say:" + plan}, want: stopped},
		{name: "the same plan reworded a little, x3", give: []string{"bash:ls=>a", "say:" + texts[0], "user:continue", "say:" + texts[1], "user:continue", "say:" + texts[2]}, want: stopped},
		{name: "a plan said twice", give: []string{"bash:ls=>a", "say:" + schema, "user:continue", "say:" + schema}, want: warned},
		{name: "long narration repeated beside different calls", history: narrate(long), want: stopped},

		// Healthy near-misses.
		{name: "short answers repeat: summary_loop's, not this rule's", give: []string{"bash:ls=>a", "say:Done.", "user:continue", "say:Done.", "user:continue", "say:Done."}, want: absent},
		{name: "short narration beside different calls", history: narrate("Let me read the next module to find where the port is chosen."), want: silent},
		{name: "different texts", give: []string{"bash:ls=>a", "say:" + plan, "user:continue", "say:" + schema, "user:continue", "say:" + long}, want: absent},
		{name: "repeated texts followed by work", give: []string{"say:" + plan, "user:continue", "say:" + plan, "bash:ls=>a", "bash:cat a=>x", "bash:cat b=>y"}, want: silent},
		{name: "the same answer to a genuine new question", give: []string{"bash:ls=>a", "say:" + plan, "user:Thanks. Which modules do the tests cover?", "say:" + plan}, want: absent},

		// Thresholds: a text as similar as output_similar_last to the last
		// one, or as output_similar_two to two recent ones, fires.
		{name: "output_similar_two at the texts' similarity", give: []string{"bash:ls=>a", "say:" + texts[0], "user:continue", "say:" + texts[1], "user:continue", "say:" + texts[2]},
			cfg: func(c *Config) { c.OutputSimilar2 = simTwo }, want: stopped},
		{name: "output_similar_two above the texts' similarity", give: []string{"bash:ls=>a", "say:" + texts[0], "user:continue", "say:" + texts[1], "user:continue", "say:" + texts[2]},
			cfg: func(c *Config) { c.OutputSimilar2 = simTwo + 0.01 }, want: absent},
		{name: "output_similar_last at the texts' similarity", give: []string{"bash:ls=>a", "say:" + texts[1], "user:continue", "say:" + texts[2]},
			cfg: func(c *Config) { c.OutputSimilarLast = simLast }, want: warned},
		{name: "output_similar_last above the texts' similarity", give: []string{"bash:ls=>a", "say:" + texts[1], "user:continue", "say:" + texts[2]},
			cfg: func(c *Config) { c.OutputSimilarLast = simLast + 0.01 }, want: absent},
	})
}

// textSimilarityRef is textSimilarity without kept sets, each set made
// in a pass of its own.
func textSimilarityRef(a, b string) float64 {
	if a == b {
		return 1
	}
	bigrams := func(s string) []uint64 {
		var out []uint64
		var prev uint64
		have := false
		eachWordHash(s, func(h uint64) {
			if have {
				out = append(out, prev*31+h)
			}
			prev, have = h, true
		})
		slices.Sort(out)
		return slices.Compact(out)
	}
	return (jaccard(wordHashes(nil, a), wordHashes(nil, b)) + jaccard(bigrams(a), bigrams(b))) / 2
}

// TestTextSimilarityKeptSets: comparing texts in any order (the latest
// with each before it, each with the next, at random) through the two
// kept sets gives what comparing them afresh gives.
func TestTextSimilarityKeptSets(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 2))
	words := []string{"the", "The", "CONFIG", "loader", "reads", "settings.toml", "café", "Ünïcode", "  ", "\n", ",", "port", "x"}
	texts := make([]string, 12)
	for i := range texts {
		var b strings.Builder
		for n := rng.IntN(30); n > 0; n-- {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		texts[i] = b.String()
	}
	texts[3] = texts[2][:len(texts[2])/2] // one text within another
	in := &inspection{w: &work{}}
	for i := 0; i < 5000; i++ {
		var a, b string
		switch i % 3 {
		case 0: // the latest with each before it
			a, b = texts[len(texts)-1], texts[i/3%len(texts)]
		case 1: // each with the next
			k := i / 3 % (len(texts) - 1)
			a, b = texts[k+1], texts[k]
		default:
			a, b = texts[rng.IntN(len(texts))], texts[rng.IntN(len(texts))]
		}
		if got, want := in.textSimilarity(a, b), textSimilarityRef(a, b); got != want {
			t.Fatalf("call %d: textSimilarity(%q, %q) = %v; want %v", i, a, b, got, want)
		}
	}
}

// TestWordHashesLowered: words are hashed lowered, non-ASCII ones as
// strings.ToLower lowers them.
func TestWordHashesLowered(t *testing.T) {
	for _, s := range []string{"Hello World", "HELLO world_1", "ÉCOLE école", "ǅemal Ωmega ω", "straße STRASSE", "a\u212Ab K"} {
		var want []uint64
		for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r < 0x80 && !isWordByte(byte(r)) }) {
			want = append(want, hashString(strings.ToLower(w)))
		}
		var got []uint64
		eachWordHash(s, func(h uint64) { got = append(got, h) })
		if !slices.Equal(got, want) {
			t.Errorf("word hashes of %q: %x; want %x", s, got, want)
		}
	}
}

func TestWordCount(t *testing.T) {
	for _, tt := range []struct {
		s           string
		limit, want int
	}{
		{"", 40, 0},
		{"  one\ttwo\nthree\r\n", 40, 3},
		{strings.Repeat("word ", 39), 40, 39},
		{strings.Repeat("word ", 40), 40, 40},
		{strings.Repeat("word ", 400), 40, 40},
		{"a b c", 2, 2},
		{"a\u00a0b", 40, 1}, // only ASCII spaces part words
	} {
		if got := wordCount(tt.s, tt.limit); got != tt.want {
			t.Errorf("wordCount(%.20q, %d) = %d; want %d", tt.s, tt.limit, got, tt.want)
		}
	}
}
