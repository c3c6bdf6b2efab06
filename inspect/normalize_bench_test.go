package inspect

import (
	"testing"
)

// corpusResults is every tool result text of the corpus, as the result
// rules read it (resultText): real test logs, file listings, tracebacks,
// diffs and progress output.
func corpusResults(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, c := range loadCorpus(t) {
		tr, err := Parse(c.Request)
		if err != nil {
			continue
		}
		for _, st := range tr.Steps {
			for _, call := range st.Calls {
				if call.HasResult {
					out = append(out, resultText(call.Result))
				}
			}
		}
	}
	return out
}

// TestAppendNormalizedCorpus holds appendNormalized to its reference on
// every tool result of the corpus.
func TestAppendNormalizedCorpus(t *testing.T) {
	results := corpusResults(t)
	if len(results) < 500 {
		t.Fatalf("corpus has %d tool results; want >= 500", len(results))
	}
	for _, s := range results {
		if got, want := string(appendNormalized(nil, s)), string(appendNormalizedRef(nil, s)); got != want {
			t.Errorf("appendNormalized(%.200q) = %.200q; want %.200q", s, got, want)
		}
	}
}

// BenchmarkAppendNormalized normalises every tool result of the corpus
// once per op, as the session cache's digest does.
func BenchmarkAppendNormalized(b *testing.B) {
	results := corpusResults(b)
	n := 0
	for _, s := range results {
		n += len(s)
	}
	buf := make([]byte, 0, 1<<16)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range results {
			buf = appendNormalized(buf[:0], s)
		}
	}
}
