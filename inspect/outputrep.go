package inspect

import (
	"slices"
	"strings"
)

// output_repetition: assistant text that repeats recent assistant text.

// textStep is an assistant text the text rules compare.
type textStep struct {
	step int
	text string
}

// minWords keeps short answers ("Done.", "OK, continuing.") out of the text
// rules: they legitimately repeat.
const minWords = 8

// minNarrationWords is how long narration beside tool calls must be for
// the text rules.
const minNarrationWords = 40

// wordCount counts the words of s, up to limit: the rules ask no more
// (a long text is read no further than its first limit words).
func wordCount(s string, limit int) int {
	n, in := 0, false
	for i := 0; i < len(s); i++ {
		sp := s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'
		if !sp && !in {
			if n == limit {
				return n
			}
			n++
		}
		in = !sp
	}
	return n
}

// outputRepetition: assistant text that nearly repeats recent assistant
// text. Narration beside tool calls is left to the tool rules unless it is
// long: "Let me run the tests again" is not a loop by itself.
func (in *inspection) outputRepetition() (Detection, bool) {
	t := in.t
	start := max(0, min(t.Start, len(t.Steps)))
	var texts []textStep
	for s := len(t.Steps) - 1; s >= start && len(texts) < 6; s-- {
		st := &t.Steps[s]
		txt := strings.TrimSpace(st.Text)
		wc := wordCount(txt, minNarrationWords)
		if wc < minWords || (len(st.Calls) > 0 && wc < minNarrationWords) {
			if len(texts) == 0 && s < len(t.Steps)-2 {
				return Detection{}, false // the latest texts are not recent: nothing current
			}
			continue
		}
		texts = append(texts, textStep{s, txt})
	}
	if len(texts) < 2 {
		return Detection{}, false
	}
	last := texts[0]
	var idxSteps []int
	simLast := in.textSimilarity(last.text, texts[1].text)
	near := 0
	for _, o := range texts[1:] {
		if in.textSimilarity(last.text, o.text) >= in.lim.OutputSimilar2 {
			near++
			idxSteps = append(idxSteps, o.step)
		}
	}
	var score float64
	count := near + 1
	switch {
	case near >= 2:
		score = grow(strongBase, strongStep, count, 3, 1)
	case simLast >= in.lim.OutputSimilarLast:
		score = 0.8
	default:
		return Detection{}, false
	}
	idxSteps = append(idxSteps, last.step)
	slices.Sort(idxSteps)
	d := Detection{Score: score}
	d.Evidence = textEvidence(last.text, idxSteps, 2)
	d.Evidence.NoProgress = near >= 2
	return d, true
}

func textEvidence(text string, steps []int, thr int) Evidence {
	return Evidence{
		Element:   `"` + shorten(collapseSpace(text), 60) + `"`,
		Result:    shorten(collapseSpace(text), 300),
		Count:     len(steps),
		Threshold: thr,
		First:     steps[0],
		Last:      steps[len(steps)-1],
		Steps:     steps,
	}
}

// textSimilarity blends word-set and word-bigram Jaccard: word sets alone
// call a shuffled text a copy, bigrams alone punish one changed word.
func (in *inspection) textSimilarity(a, b string) float64 {
	if a == b {
		return 1
	}
	sa := in.textSetsOf(a, b)
	sb := in.textSetsOf(b, a)
	return (jaccard(sa.words, sb.words) + jaccard(sa.bigrams, sb.bigrams)) / 2
}

// textSets are a text's word and word-bigram hash sets.
type textSets struct {
	text           string
	words, bigrams []uint64
}

// textSetsOf returns the sets of s. The two last computed are kept
// (work.texts), and the one of other is not replaced: output_repetition
// compares the latest text with each before it, summary_loop each text
// with the next.
func (in *inspection) textSetsOf(s, other string) *textSets {
	kept := &in.w.texts
	for i := range kept {
		if sameString(kept[i].text, s) {
			return &kept[i]
		}
	}
	ts := &kept[0]
	if sameString(ts.text, other) {
		ts = &kept[1]
	}
	ts.text = s
	ts.words, ts.bigrams = wordAndBigramHashes(ts.words[:0], ts.bigrams[:0], s)
	return ts
}

// forget keeps no text: what a later inspection finds kept must be of
// its own strings.
func (ts *textSets) forget() {
	ts.text, ts.words, ts.bigrams = "", ts.words[:0], ts.bigrams[:0] // the sets of ""
}
