package inspect

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	fnvhash "hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The -update flag may already be registered by another test file of this
// package (the usual golden-file idiom); reuse it rather than panic on a
// second registration.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files in testdata")
	}
}

func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// streamFixture is one file of testdata/stream: a header of "key: value"
// lines, a blank line, then the streamed text.
type streamFixture struct {
	name      string
	loop      bool
	offMin    int64
	offMax    int64
	within    int64 // fire no later than this many bytes after offMax (0: unchecked)
	note      string
	text      []byte
	sourceRaw []byte
}

func loadStreamFixtures(t testing.TB) []streamFixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "stream", "*.txt"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no stream fixtures: %v", err)
	}
	var out []streamFixture
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fx, err := parseStreamFixture(strings.TrimSuffix(filepath.Base(p), ".txt"), raw)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, fx)
	}
	return out
}

func parseStreamFixture(name string, raw []byte) (streamFixture, error) {
	fx := streamFixture{name: name, sourceRaw: raw}
	hdr, text, ok := bytes.Cut(raw, []byte("\n\n"))
	if !ok {
		return fx, fmt.Errorf("no blank line after the header")
	}
	fx.text = text
	expect := ""
	for _, line := range strings.Split(string(hdr), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			return fx, fmt.Errorf("header line %q", line)
		}
		switch k {
		case "expect":
			expect = v
		case "note":
			fx.note = v
		case "within":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fx, err
			}
			fx.within = n
		case "offset":
			a, b, ok := strings.Cut(v, "-")
			lo, err1 := strconv.ParseInt(a, 10, 64)
			hi, err2 := strconv.ParseInt(b, 10, 64)
			if !ok || err1 != nil || err2 != nil || lo > hi {
				return fx, fmt.Errorf("offset %q", v)
			}
			fx.offMin, fx.offMax = lo, hi
		default:
			return fx, fmt.Errorf("unknown header %q", k)
		}
	}
	switch expect {
	case "loop":
		fx.loop = true
		if fx.offMax == 0 && fx.offMin == 0 && !strings.Contains(string(hdr), "offset:") {
			return fx, fmt.Errorf("loop fixture without offset")
		}
	case "no_loop":
	default:
		return fx, fmt.Errorf("expect %q", expect)
	}
	return fx, nil
}

// streamResult is everything observable about one run of the detector.
type streamResult struct {
	fired   bool
	firedAt int64 // bytes fed when Write first returned true
	offset  int64
	det     Detection
}

// feed writes text in deltas whose sizes come from sizes (nil: one piece)
// and stops feeding once Write reports true, as the proxy would.
func feed(d *Degeneration, text []byte, sizes func() int) streamResult {
	var r streamResult
	for off := 0; off < len(text) || off == 0; {
		n := len(text) - off
		if sizes != nil {
			n = min(n, sizes())
		}
		if d.Write(text[off : off+n]) {
			r.fired = true
			// Locate the byte that tipped it, independently of delta size.
			r.firedAt = int64(off + n)
			break
		}
		off += n
		if off >= len(text) {
			break
		}
	}
	r.offset, r.det = d.Offset(), d.Detection()
	return r
}

// firstFiring finds the exact byte count at which a fresh detector fires,
// by feeding one byte at a time.
func firstFiring(cfg StreamConfig, text []byte) int64 {
	d := NewDegeneration(cfg)
	for i := range text {
		if d.Write(text[i : i+1]) {
			return int64(i + 1)
		}
	}
	return -1
}

func randomSizes(name string) func() int {
	h := fnvhash.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(h.Sum64(), 42))
	return func() int { return 1 + rng.IntN(64) }
}

func TestDegenerationFixtures(t *testing.T) {
	fixtures := loadStreamFixtures(t)
	if len(fixtures) < 25 {
		t.Fatalf("%d stream fixtures; want at least 25", len(fixtures))
	}
	pooled := NewDegeneration(StreamConfig{}) // reused across fixtures via Reset
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			whole := feed(NewDegeneration(StreamConfig{}), fx.text, nil)
			split := feed(NewDegeneration(StreamConfig{}), fx.text, randomSizes(fx.name))
			pooled.Reset()
			reused := feed(pooled, fx.text, randomSizes(fx.name+"/pooled"))

			if whole.fired != fx.loop {
				t.Fatalf("fired = %v (offset %d, %+v); want %v", whole.fired, whole.offset, whole.det.Evidence, fx.loop)
			}
			for _, other := range []struct {
				name string
				r    streamResult
			}{{"random deltas", split}, {"reused detector", reused}} {
				if other.r.fired != whole.fired || other.r.offset != whole.offset ||
					other.r.det.Evidence.Element != whole.det.Evidence.Element ||
					other.r.det.Evidence.Count != whole.det.Evidence.Count {
					t.Errorf("%s: fired=%v offset=%d %q x%d; whole: fired=%v offset=%d %q x%d", other.name,
						other.r.fired, other.r.offset, other.r.det.Evidence.Element, other.r.det.Evidence.Count,
						whole.fired, whole.offset, whole.det.Evidence.Element, whole.det.Evidence.Count)
				}
			}
			if !fx.loop {
				if !reflect.DeepEqual(whole.det, Detection{}) || whole.offset != 0 {
					t.Errorf("Detection() = %+v, Offset() = %d without a finding; want zero", whole.det, whole.offset)
				}
				return
			}
			if whole.offset < fx.offMin || whole.offset > fx.offMax {
				t.Errorf("Offset() = %d; want %d..%d (unit %q)", whole.offset, fx.offMin, fx.offMax, whole.det.Evidence.Element)
			}
			det := whole.det
			if det.Category != TokenDegeneration || det.Score <= 0.9 || det.Score > 1 {
				t.Errorf("Detection() = %s score %v; want %s with score in (0.9, 1]", det.Category, det.Score, TokenDegeneration)
			}
			if det.Evidence.Element == "" || !utf8.ValidString(det.Evidence.Element) || strings.ContainsAny(det.Evidence.Element, "\n\r\t") {
				t.Errorf("Element = %q; want a non-empty one-line UTF-8 snippet", det.Evidence.Element)
			}
			if len(det.Evidence.Element) > degElemMax+len("…") {
				t.Errorf("Element is %d bytes; want at most %d", len(det.Evidence.Element), degElemMax+len("…"))
			}
			if det.Evidence.Count < det.Evidence.Threshold || det.Evidence.Threshold < 2 {
				t.Errorf("Count %d, Threshold %d; want Count >= Threshold >= 2", det.Evidence.Count, det.Evidence.Threshold)
			}
			at := firstFiring(StreamConfig{}, fx.text)
			if fx.within > 0 && at-fx.offMax > fx.within {
				t.Errorf("fired %d bytes after the loop began; want within %d", at-fx.offMax, fx.within)
			}
			t.Logf("fired at byte %d, offset %d, latency %d, %q x%d (threshold %d)", at, whole.offset, at-whole.offset,
				det.Evidence.Element, det.Evidence.Count, det.Evidence.Threshold)
		})
	}
}

// TestDegenerationStructureAcrossDeltas pins the split points that broke
// gemini-cli's per-delta fence parity: the fence and table markers arrive
// in pieces, and the repeated lines inside must still get the structured
// threshold.
func TestDegenerationStructureAcrossDeltas(t *testing.T) {
	line := "    emit(frame, PADDING_VALUE); // pad\n" // 38 bytes: a phrase, prose threshold 8
	body := strings.Repeat(line, 20)                   // 20 copies: below the structured 30
	tests := []struct {
		name   string
		deltas []string
		want   bool
	}{
		{"fence whole", []string{"Code:\n```c\n", body, "```\n"}, false},
		{"fence split 1+2", []string{"Code:\n`", "``c\n", body, "```\n"}, false},
		{"fence split 2+1", []string{"Code:\n``", "`c\n", body, "`", "``\n"}, false},
		{"fence one byte at a time", append(strings.Split("Code:\n```c\n", ""), body, "```\n"), false},
		{"no fence: prose threshold", []string{"Code:\n", strings.ReplaceAll(body, "    ", "")}, true},
		{"fence closed then prose loop", []string{"```\nx\n`", "``\nText. ", strings.Repeat("Then we return the sum to the caller. ", 10)}, true},
		{"table split", []string{"|", " a |\n|", strings.Repeat("| same row of the table here |\n", 20)}, false},
		{"table row forever", []string{"|", strings.Repeat("| same row of the table here |\n", 40)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDegeneration(StreamConfig{})
			got := false
			for _, p := range tt.deltas {
				got = d.Write([]byte(p))
			}
			if got != tt.want {
				t.Errorf("Write(...) = %v (%+v); want %v", got, d.Detection().Evidence, tt.want)
			}
		})
	}
}

func TestDegenerationSticky(t *testing.T) {
	d := NewDegeneration(StreamConfig{})
	if !reflect.DeepEqual(d.Detection(), Detection{}) || d.Offset() != 0 {
		t.Fatalf("fresh detector: Detection() = %+v, Offset() = %d; want zero", d.Detection(), d.Offset())
	}
	text := "Intro. " + strings.Repeat("!", 150)
	if !d.Write([]byte(text)) {
		t.Fatalf("Write(%d bangs) = false; want true", 150)
	}
	det, off := d.Detection(), d.Offset()
	if off != 7 {
		t.Errorf("Offset() = %d; want 7", off)
	}
	if !d.Write([]byte("healthy text afterwards")) || !reflect.DeepEqual(d.Detection(), det) || d.Offset() != off {
		t.Errorf("after firing: Write = false or the finding changed; want sticky")
	}
	d.Reset()
	if !reflect.DeepEqual(d.Detection(), Detection{}) || d.Offset() != 0 || d.Write([]byte("fine")) {
		t.Errorf("after Reset: Detection() = %+v, Offset() = %d; want zero", d.Detection(), d.Offset())
	}
}

func TestStreamConfigNormalized(t *testing.T) {
	tests := []struct {
		name string
		give StreamConfig
		want StreamConfig
	}{
		{"zero takes defaults", StreamConfig{}, DefaultStreamConfig()},
		{"negative takes defaults", StreamConfig{Repeats: -1, Window: -5}, DefaultStreamConfig()},
		{"window grows to hold two phrases and rounds to a power of two",
			StreamConfig{MaxPhrase: 1000, Window: 100},
			func() StreamConfig { c := DefaultStreamConfig(); c.MaxPhrase, c.Window = 1000, 2048; return c }()},
		{"min phrase not above max", StreamConfig{MinPhrase: 300, MaxPhrase: 50},
			func() StreamConfig { c := DefaultStreamConfig(); c.MinPhrase, c.MaxPhrase = 50, 50; return c }()},
		{"loose window within 32..256 words", StreamConfig{LooseWindow: 5000},
			func() StreamConfig { c := DefaultStreamConfig(); c.LooseWindow = looseRing; return c }()},
		{"loose window at least 32 words", StreamConfig{LooseWindow: 3},
			func() StreamConfig { c := DefaultStreamConfig(); c.LooseWindow = 4 * looseSpan; return c }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.normalized(); got != tt.want {
				t.Errorf("normalized(%+v) = %+v; want %+v", tt.give, got, tt.want)
			}
		})
	}
}

// TestDegenerationConfigRespected checks that the thresholds are the knobs
// they claim to be.
func TestDegenerationConfigRespected(t *testing.T) {
	sentence := "Please wait while I check the logs. " // 36 bytes
	tests := []struct {
		name   string
		cfg    StreamConfig
		unit   string // "" for sentence
		copies int
		want   bool
	}{
		{"default repeats 10: 9 copies", StreamConfig{}, "", 9, false},
		{"default repeats 10: 10 copies", StreamConfig{}, "", 10, true},
		{"default repeats 10: 11 copies", StreamConfig{}, "", 11, true},
		{"repeats 4: 3 copies", StreamConfig{Repeats: 4}, "", 3, false},
		{"repeats 4: 4 copies", StreamConfig{Repeats: 4}, "", 4, true},
		{"repeats 4: 5 copies", StreamConfig{Repeats: 4}, "", 5, true},
		// 25 copies are 176 words, fewer than the loose rule's window.
		{"max phrase below unit", StreamConfig{MaxPhrase: 30}, "", 25, false},
		{"max phrase below unit: the loose rule still cuts", StreamConfig{MaxPhrase: 30}, "", 40, true},
		{"loose window 256: 36 copies are too few", StreamConfig{MaxPhrase: 30, LooseWindow: 256}, "", 36, false},
		{"default char run 100: 99 bytes", StreamConfig{}, "a", 99, false},
		{"default char run 100: 100 bytes", StreamConfig{}, "a", 100, true},
		{"char run 150: 149 bytes", StreamConfig{CharRun: 150}, "a", 149, false},
		{"char run 150: 150 bytes", StreamConfig{CharRun: 150}, "a", 150, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unit := cmp.Or(tt.unit, sentence)
			d := NewDegeneration(tt.cfg)
			if got := d.Write([]byte("Hello. " + strings.Repeat(unit, tt.copies))); got != tt.want {
				t.Errorf("Write(%d copies of %q) = %v; want %v", tt.copies, unit, got, tt.want)
			}
		})
	}
}

// TestStreamCasesJSONL keeps testdata/stream/cases.jsonl, the replay
// records of the fixtures, in sync with the .txt files (go test -update).
func TestStreamCasesJSONL(t *testing.T) {
	var buf bytes.Buffer
	for _, fx := range loadStreamFixtures(t) {
		line, err := replayRecord(fx)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(line)
	}
	path := filepath.Join("testdata", "stream", "cases.jsonl")
	if updating() {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Errorf("%s is out of date with the .txt fixtures; run go test ./inspect -run TestStreamCasesJSONL -update", path)
	}
	// Each record must carry the fixture's text back out of its SSE.
	for i, line := range bytes.Split(bytes.TrimSpace(got), []byte("\n")) {
		var rec struct {
			ID, Expect  string
			ResponseSSE string `json:"response_sse"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if !strings.HasSuffix(rec.ResponseSSE, "data: [DONE]\n\n") {
			t.Errorf("%s: response_sse does not end with data: [DONE]", rec.ID)
		}
	}
}

// replayRecord renders a fixture as one `loopguard replay` JSONL record whose
// response streams the text in content deltas of about 16 bytes, cut on rune
// boundaries so that every chunk is valid JSON text.
func replayRecord(fx streamFixture) ([]byte, error) {
	type delta struct {
		Role    string  `json:"role,omitempty"`
		Content *string `json:"content,omitempty"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Delta        delta   `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	type chunk struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int64    `json:"created"`
		Model   string   `json:"model"`
		Choices []choice `json:"choices"`
	}
	var sse bytes.Buffer
	emit := func(c choice) error {
		b, err := marshalNoEscape(chunk{ID: "chatcmpl-" + fx.name, Object: "chat.completion.chunk", Model: "m", Choices: []choice{c}})
		if err != nil {
			return err
		}
		sse.WriteString("data: ")
		sse.Write(b)
		sse.WriteString("\n\n")
		return nil
	}
	empty := ""
	if err := emit(choice{Delta: delta{Role: "assistant", Content: &empty}}); err != nil {
		return nil, err
	}
	text := fx.text
	for len(text) > 0 {
		n := min(16, len(text))
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n++
		}
		s := string(text[:n])
		text = text[n:]
		if err := emit(choice{Delta: delta{Content: &s}}); err != nil {
			return nil, err
		}
	}
	stop := "stop"
	if err := emit(choice{FinishReason: &stop}); err != nil {
		return nil, err
	}
	sse.WriteString("data: [DONE]\n\n")

	expect := "no_loop"
	if fx.loop {
		expect = "loop"
	}
	prompt := "Stream fixture " + fx.name
	if fx.note != "" {
		prompt += ": " + fx.note
	}
	rec := struct {
		ID      string `json:"id"`
		Expect  string `json:"expect"`
		Request struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		} `json:"request"`
		ResponseSSE string `json:"response_sse"`
	}{ID: "stream/" + fx.name, Expect: expect, ResponseSSE: sse.String()}
	rec.Request.Model, rec.Request.Stream = "m", true
	rec.Request.Messages = append(rec.Request.Messages, struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}{"user", prompt})
	b, err := marshalNoEscape(rec)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// marshalNoEscape is json.Marshal without HTML escaping, so the SSE reads
// like what servers send.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
