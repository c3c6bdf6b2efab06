package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/loopguard/loopguard/internal/wireapi"
)

// history is a request body split into its history array and the rest, so
// that tests can send any list of its messages the way a client would.
type history struct {
	api  API
	key  string // "messages" or "input"
	rest map[string]json.RawMessage
	msgs []json.RawMessage
}

func splitHistory(t testing.TB, api API, body []byte) (history, bool) {
	t.Helper()
	h := history{api: api, key: "messages"}
	if api == wireapi.Responses {
		h.key = "input"
	}
	if err := json.Unmarshal(body, &h.rest); err != nil {
		t.Fatal(err)
	}
	if json.Unmarshal(h.rest[h.key], &h.msgs) != nil || len(h.msgs) == 0 {
		return h, false
	}
	return h, true
}

// body renders the request with msgs as its history; the history array is
// written as a client writes it, one message after another.
func (h history) body(msgs []json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteString(`{"` + h.key + `":[`)
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteByte(']')
	for k, v := range h.rest {
		if k != h.key {
			fmt.Fprintf(&b, ",%q:%s", k, v)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// cacheCase is one history the property test grows and edits.
type cacheCase struct {
	name string
	h    history
}

func cacheCases(t *testing.T) []cacheCase {
	var out []cacheCase
	for _, c := range loadCorpus(t) {
		if h, ok := splitHistory(t, DetectAPI("", c.Request), c.Request); ok {
			out = append(out, cacheCase{c.ID, h})
		}
	}
	files, _ := filepath.Glob("testdata/adapters/*.json")
	// Ollama's fixtures go last: the property test's random edits are
	// drawn in case order, and the cases before them keep their draws.
	ollama := func(f string) int {
		if strings.HasSuffix(f, ".ollama.json") {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(files, func(a, b string) int { return ollama(a) - ollama(b) })
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		api := API(strings.TrimPrefix(filepath.Ext(strings.TrimSuffix(f, ".json")), "."))
		if h, ok := splitHistory(t, api, body); ok {
			out = append(out, cacheCase{filepath.Base(f), h})
		}
	}
	out = append(out, cacheCase{"writes", writesHistory(10)}, cacheCase{"syntax errors", syntaxErrorHistory(10, 2)})
	for _, z := range zoneHistories(DefaultConfig().Window) {
		out = append(out, z.cacheCase)
	}
	for _, o := range outcomeCases() {
		out = append(out, o.cacheCase)
	}
	return out
}

// settle computes every lazily cached field, so that two trajectories
// compare by what they say, not by what was asked of them before.
func settle(tr *Trajectory) {
	for s := range tr.Steps {
		for k := range tr.Steps[s].Calls {
			tr.Steps[s].Calls[k].ResultFingerprint()
		}
	}
}

// checkSame parses body with and without the cache and requires the same
// trajectory and the same verdict, detections and evidence included.
// It returns the cached parse's trajectory and the full one.
func checkSame(t *testing.T, e *Engine, c *SessionCache, session string, api API, body []byte, what string) (got, want *Trajectory) {
	t.Helper()
	want, werr := e.ParseAPI(api, body)
	got, gerr := e.ParseSession(c, session, api, body)
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("%s: error %v with the cache, %v without", what, gerr, werr)
	}
	if werr != nil {
		return nil, nil
	}
	// The reach the cached parse found from the previous turn's is the
	// one a walk over all its steps finds.
	if r := got.reach; r.e != nil {
		from, skip, _ := e.walkReach(got)
		if r.from != from || r.skip != skip || r.steps != len(got.Steps) || r.start != got.Start {
			t.Fatalf("%s: reach %+v, a walk finds from %d skip %d", what, r, from, skip)
		}
		if en := c.get(session); en != nil && en.engine == e {
			if _, _, n := e.walkReach(&Trajectory{Steps: en.steps[:len(got.Steps)], Start: got.Start}); en.from != from || en.counted != n {
				t.Fatalf("%s: entry reach from %d counting %d, a walk finds from %d counting %d", what, en.from, en.counted, from, n)
			}
			// The entry lists the steps a result may still pair with.
			var want []int32
			for s := max(0, len(en.steps)-lookBack); s < len(en.steps); s++ {
				if unanswered(&en.steps[s]) {
					want = append(want, int32(s))
				}
			}
			if u := en.unanswered; u.n < 0 && len(want) <= len(u.at) || u.n >= 0 && !slices.Equal(u.at[:u.n], want) {
				t.Fatalf("%s: entry lists unanswered steps %v (%d), want %v", what, u.at, u.n, want)
			}
		}
	}
	wv, gv := e.Inspect(want), e.Inspect(got)
	if diff := cachedSame(e, got, want); diff != "" {
		t.Fatalf("%s: trajectories differ: %s", what, diff)
	}
	if !reflect.DeepEqual(wv, gv) {
		t.Fatalf("%s: verdicts differ:\ncached %+v\nfull   %+v", what, gv, wv)
	}
	return got, want
}

// TestSessionCacheSameVerdicts runs every corpus and adapter history
// through the cached and the uncached parse: grown turn by turn, then
// edited, truncated, compacted, re-sent and grown at random. Every request
// must yield the same trajectory and verdict both ways, and growing turns
// must be served from the cache. It runs with each trajectory released
// once judged, as the proxy does (the next turn extends its steps in
// place), and kept (the next turn copies them).
func TestSessionCacheSameVerdicts(t *testing.T) {
	if testing.Short() {
		t.Skip("replays long sessions turn by turn, twice: skipped under -short")
	}
	for _, release := range []bool{true, false} {
		t.Run(fmt.Sprintf("release=%v", release), func(t *testing.T) { sameVerdicts(t, release) })
	}
}

func sameVerdicts(t *testing.T, release bool) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(12, 1))
	var hits uint64
	cases := cacheCases(t)
	check := func(c *SessionCache, api API, body []byte, what string) (got, want *Trajectory) {
		t.Helper()
		got, want = checkSame(t, e, c, "s", api, body, what)
		if release {
			got.Release()
		}
		return got, want
	}
	for _, cc := range cases {
		c := NewSessionCache(64 << 20)
		h, n := cc.h, len(cc.h.msgs)
		// Turn by turn, as an agent sends it.
		var prevGot, prevWant *Trajectory
		for k := 1; k <= n; k++ {
			got, want := check(c, h.api, h.body(h.msgs[:k]), fmt.Sprintf("%s grown to %d", cc.name, k))
			// The next turn resumed from this one's state: unless this
			// one was released, it must not have written into this
			// trajectory (pairing a result with one of its calls, say).
			if prevGot != nil && !release {
				if diff := cachedSame(e, prevGot, prevWant); diff != "" {
					t.Fatalf("%s: turn %d changed turn %d's trajectory: %s", cc.name, k, k-1, diff)
				}
			}
			prevGot, prevWant = got, want
		}
		if st := c.Stats(); st.Hits < uint64(n-1) {
			t.Errorf("%s: %d hits for %d growing turns; want every turn after the first", cc.name, st.Hits, n-1)
		}
		// Random histories from the last one sent.
		cur := append([]json.RawMessage(nil), h.msgs[:max(1, n/2)]...)
		for step := 0; step < 40; step++ {
			what := ""
			switch op := rng.IntN(7); {
			case op <= 2 && len(cur) < n: // grow by 1..3
				cur = append(cur, h.msgs[len(cur):min(n, len(cur)+1+rng.IntN(3))]...)
				what = "grow"
			case op == 3 && len(cur) > 1: // truncate
				cur = cur[:1+rng.IntN(len(cur)-1)]
				what = "truncate"
			case op == 4: // edit one message
				i := rng.IntN(len(cur))
				cur = append(cur[:i:i], append([]json.RawMessage{editMessage(t, cur[i], rng.IntN(2) == 0)}, cur[i+1:]...)...)
				what = "edit"
			case op == 5 && len(cur) > 2: // compact: drop a message
				i := rng.IntN(len(cur))
				cur = append(cur[:i:i], cur[i+1:]...)
				what = "drop"
			case op == 6: // a broken body that extends the history
				body := h.body(append(cur[:len(cur):len(cur)], h.msgs[rng.IntN(n)]))
				check(c, h.api, corrupt(body, rng), fmt.Sprintf("%s step %d (corrupt)", cc.name, step))
				continue
			default: // the same history again (a retry)
				what = "resend"
			}
			check(c, h.api, h.body(cur), fmt.Sprintf("%s step %d (%s to %d messages)", cc.name, step, what, len(cur)))
		}
		// Another session's history under the same key.
		other := cases[rng.IntN(len(cases))].h
		check(c, other.api, other.body(other.msgs), cc.name+" then another history")
		hits += c.Stats().Hits
	}
	if hits == 0 {
		t.Fatal("no request was served from the cache")
	}
}

// editMessage returns message m re-indented (the same message in other bytes) or
// with its text content changed.
func editMessage(t *testing.T, m json.RawMessage, reformat bool) json.RawMessage {
	if reformat {
		var b bytes.Buffer
		if err := json.Indent(&b, m, "", "  "); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	var v map[string]any
	if err := json.Unmarshal(m, &v); err != nil {
		t.Fatal(err)
	}
	if s, ok := v["content"].(string); ok {
		v["content"] = s + " (edited)"
	} else {
		v["content"] = "Fix the failing build."
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cachedSame compares a cached parse with the full one: equal but for
// what the cache drops, results it replaced by their digest (which must
// be the digest of the full parse's result), results before the reach of
// e's detectors and reasoning texts. It returns "" when they are, else
// the first difference.
func cachedSame(e *Engine, got, want *Trajectory) string {
	settle(want)
	from, _ := e.reach(want)
	g := *got
	g.lease, g.reach = nil, reachMemo{}
	g.Steps = slices.Clone(got.Steps)
	for s := range g.Steps {
		gs := &g.Steps[s]
		gs.Calls = slices.Clone(gs.Calls)
		if s >= len(want.Steps) {
			continue
		}
		ws := &want.Steps[s]
		for k := range gs.Calls {
			gc := &gs.Calls[k]
			if k < len(ws.Calls) && s < from && !gc.digested() && gc.Result == "" {
				gc.Result = ws.Calls[k].Result // dropped
				continue
			}
			if !gc.digested() || k >= len(ws.Calls) {
				continue
			}
			wc := ws.Calls[k]
			if digestResult(&wc); wc.digest() != nil && gc.digest() == nil {
				// The evidence text was dropped.
				if z := e.evidenceZone(want); z.reports(s, k, &wc) {
					return fmt.Sprintf("step %d call %d: evidence dropped, and a rule may report it", s, k)
				}
				wc.dropDigest()
			}
			wd, gd := wc.digest(), gc.digest()
			if wc.resultFacts != gc.resultFacts || wc.resultFP != gc.resultFP || (wd == nil) != (gd == nil) || wd != nil && *wd != *gd {
				return fmt.Sprintf("step %d call %d: digest %x %x %+v, want %x %x %+v", s, k, gc.resultFacts, gc.resultFP, gd, wc.resultFacts, wc.resultFP, wd)
			}
			gc.dropDigest()
			gc.Result, gc.resultFacts = ws.Calls[k].Result, 0
		}
	}
	settle(&g)
	if !reflect.DeepEqual(&g, want) {
		return trajectoryDiff(&g, want)
	}
	return ""
}

// trajectoryDiff names the first difference between a cached and a full
// parse, without printing whole histories.
func trajectoryDiff(got, want *Trajectory) string {
	switch {
	case got.Model != want.Model || got.Start != want.Start || got.Messages != want.Messages:
		return fmt.Sprintf("model/start/messages %q/%d/%d, want %q/%d/%d", got.Model, got.Start, got.Messages, want.Model, want.Start, want.Messages)
	case got.Layout != want.Layout:
		return fmt.Sprintf("layout %v, want %v", got.Layout, want.Layout)
	case len(got.Steps) != len(want.Steps):
		return fmt.Sprintf("%d steps, want %d", len(got.Steps), len(want.Steps))
	}
	for i := range got.Steps {
		if !reflect.DeepEqual(got.Steps[i], want.Steps[i]) {
			return fmt.Sprintf("step %d:\n%s\nwant\n%s", i, shorten(fmt.Sprintf("%+v", got.Steps[i]), 600), shorten(fmt.Sprintf("%+v", want.Steps[i]), 600))
		}
	}
	return "unexported fields"
}

// TestSessionCacheBudget checks the LRU: the cache never holds more than
// its budget, the least recently used session goes first, and a nil cache
// parses in full.
func TestSessionCacheBudget(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(20))
	turn := func(c *SessionCache, session string, k int) {
		t.Helper()
		if _, err := e.ParseSession(c, session, wireapi.Chat, h.body(h.msgs[:k])); err != nil {
			t.Fatal(err)
		}
	}
	probe := NewSessionCache(1 << 30)
	turn(probe, "a", 30)
	one := probe.Stats().Bytes
	if held := entryStrings(probe.get("a")); one < held {
		t.Fatalf("one session holds %d bytes by the count, and %d bytes of strings: the count misses them", one, held)
	}
	c := NewSessionCache(one*3 + one/2) // room for three sessions
	for _, s := range []string{"a", "b", "c", "d"} {
		turn(c, s, 30)
	}
	st := c.Stats()
	if st.Sessions != 3 || st.Bytes > one*3+one/2 || st.Misses != 4 {
		t.Fatalf("stats %+v; want 3 sessions within %d bytes after 4 misses", st, one*3+one/2)
	}
	turn(c, "d", 31) // the newest is kept
	turn(c, "a", 31) // the oldest was evicted
	if st := c.Stats(); st.Hits != 1 || st.Misses != 5 {
		t.Fatalf("stats %+v; want 1 hit (d) and 5 misses (a evicted)", st)
	}
	if NewSessionCache(0) != nil || NewSessionCache(0).Stats() != (CacheStats{}) {
		t.Fatal("a zero budget must turn the cache off")
	}
	turn(nil, "a", 31)
}

// entryStrings is the length of the strings a cache entry's steps hold.
func entryStrings(en *cacheEntry) int64 {
	n := 0
	for _, st := range en.steps {
		n += len(st.Text)
		for _, c := range st.Calls {
			for _, f := range c.strings() {
				n += len(*f)
			}
			if d := c.digest(); d != nil {
				n += len(d.evidence)
			}
		}
	}
	return int64(n)
}

// corrupt breaks the end of a body (where a cached prefix does not reach)
// or repeats its history member.
func corrupt(body []byte, rng *rand.Rand) []byte {
	end := bytes.LastIndexByte(body, ']')
	switch rng.IntN(4) {
	case 0: // cut short, anywhere
		return body[:rng.IntN(len(body))]
	case 1: // a trailing comma
		return append(append(body[:end:end], ",]"...), body[end+1:]...)
	case 2: // an element that is not JSON
		return append(append(body[:end:end], `,{"role":}]`...), body[end+1:]...)
	}
	// A second history member after the first: the last one wins.
	return append(body[:len(body)-1:len(body)-1], `,"messages":[],"input":[]}`...)
}

// TestSessionCacheConcurrentTurns sends the turns of one session from
// several goroutines at once, inspecting each trajectory while others
// resume from it, half of them releasing theirs once judged (the next
// turn may then lease the entry and extend its steps in place): under
// -race, a write into steps another request reads shows, and every
// verdict must still be the full parse's.
func TestSessionCacheConcurrentTurns(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(40))
	c := NewSessionCache(64 << 20)
	want := make([]Verdict, len(h.msgs)+1)
	for k := 1; k <= len(h.msgs); k++ {
		tr, err := e.ParseAPI(wireapi.Chat, h.body(h.msgs[:k]))
		if err != nil {
			t.Fatal(err)
		}
		want[k] = e.Inspect(tr)
	}
	concurrently(t, 8, func(g int) string {
		for k := 1 + g%3; k <= len(h.msgs); k++ {
			tr, err := e.ParseSession(c, "s", wireapi.Chat, h.body(h.msgs[:k]))
			if err != nil {
				return err.Error()
			}
			if v := e.Inspect(tr); !reflect.DeepEqual(v, want[k]) {
				return fmt.Sprintf("turn %d: %v; want %v", k, v.Detections, want[k].Detections)
			}
			if g%2 == 0 {
				tr.Release()
			}
		}
		return ""
	})
	if c.Stats().Hits == 0 {
		t.Error("no turn was served from the cache")
	}
}

// concurrently runs f(0) .. f(n-1) at once and fails t with the messages
// they return ("": passed).
func concurrently(t *testing.T, n int, f func(g int) string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if msg := f(g); msg != "" {
				errs <- msg
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}

// TestSessionCacheConcurrentEdits is the property test with requests of
// one session sent at once: goroutines grow, truncate, edit and re-send
// its history at random, most releasing each trajectory once judged, so
// that leases, copies and full parses of the same entry interleave. Every
// request must yield the full parse's trajectory and verdict, and under
// -race no request may write steps another reads.
func TestSessionCacheConcurrentEdits(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(60))
	n := len(h.msgs)
	c := NewSessionCache(64 << 20)
	concurrently(t, 6, func(g int) string {
		rng := rand.New(rand.NewPCG(uint64(g), 7))
		cur := slices.Clone(h.msgs[:n/2])
		for step := 0; step < 60; step++ {
			switch op := rng.IntN(6); {
			case op <= 2 && len(cur) < n:
				cur = append(cur, h.msgs[len(cur):min(n, len(cur)+1+rng.IntN(2))]...)
			case op == 3 && len(cur) > 2:
				cur = cur[:len(cur)-1-rng.IntN(3)]
			case op == 4:
				i := rng.IntN(len(cur))
				cur = append(cur[:i:i], append([]json.RawMessage{editMessage(t, cur[i], false)}, cur[i+1:]...)...)
			}
			body := h.body(cur)
			got, err := e.ParseSession(c, "s", wireapi.Chat, body)
			if err != nil {
				return err.Error()
			}
			want, err := e.ParseAPI(wireapi.Chat, body)
			if err != nil {
				return err.Error()
			}
			if diff := cachedSame(e, got, want); diff != "" {
				return fmt.Sprintf("goroutine %d step %d: %s", g, step, diff)
			}
			if gv, wv := e.Inspect(got), e.Inspect(want); !reflect.DeepEqual(gv, wv) {
				return fmt.Sprintf("goroutine %d step %d: verdict %v, want %v", g, step, gv.Detections, wv.Detections)
			}
			if g < 4 {
				got.Release()
			}
		}
		return ""
	})
	if c.Stats().Hits == 0 {
		t.Error("no request was served from the cache")
	}
}

// TestSessionCacheLeasedTurns: a session whose trajectories are released
// once judged extends one steps array in place turn after turn (copying
// it only to grow it: most turns, stepsRoom at a time at first), and
// judges every turn as uncached; one whose trajectories are kept copies
// its steps every turn.
func TestSessionCacheLeasedTurns(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(150))
	for _, release := range []bool{true, false} {
		c := NewSessionCache(64 << 20)
		var prev *Trajectory
		inPlace, turns, requests := 0, 0, 0
		for k := 2; k <= len(h.msgs); k += 2 {
			requests++
			got, _ := checkSame(t, e, c, "s", wireapi.Chat, h.body(h.msgs[:k]), fmt.Sprintf("release %v, grown to %d", release, k))
			if prev != nil && len(prev.Steps) > 0 {
				turns++
				if unsafe.SliceData(got.Steps) == unsafe.SliceData(prev.Steps) {
					inPlace++
				}
			}
			if release {
				got.Release()
			}
			prev = got
		}
		t.Logf("release %v: %d of %d turns extended the previous steps in place", release, inPlace, turns)
		if release && inPlace < turns*3/4 || !release && inPlace > 0 {
			t.Errorf("release %v: %d of %d turns extended the previous turn's steps in place", release, inPlace, turns)
		}
		if st := c.Stats(); st.Hits != uint64(requests-1) {
			t.Errorf("release %v: stats %+v; want %d hits", release, st, requests-1)
		}
	}
}

// TestSessionCacheBytesPerSession: a session cached turn by turn holds
// about what one parse of its whole history holds, not an arena's
// minimum per turn, and much less than the history.
func TestSessionCacheBytesPerSession(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(200))
	grown, once := NewSessionCache(1<<30), NewSessionCache(1<<30)
	for k := 1; k <= len(h.msgs); k++ {
		if _, err := e.ParseSession(grown, "s", wireapi.Chat, h.body(h.msgs[:k])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ParseSession(once, "s", wireapi.Chat, h.body(h.msgs)); err != nil {
		t.Fatal(err)
	}
	g, o := grown.Stats().Bytes, once.Stats().Bytes
	t.Logf("%d-byte history: %d bytes cached turn by turn, %d parsed at once", len(h.body(h.msgs)), g, o)
	if g > o*3/2 {
		t.Errorf("a session grown turn by turn holds %d bytes, %.1fx what one parse of its history holds (%d)", g, float64(g)/float64(o), o)
	}
	// Tool output is most of the history, and the cache keeps digests of
	// it, not its text.
	if n := int64(len(h.body(h.msgs))); g > n/2 {
		t.Errorf("a session holds %d bytes for a %d-byte history: more than half of it", g, n)
	}
	// What a long session costs the cache, a turn (one call and its
	// result) at a time.
	if turns := int64(len(h.msgs)-2) / 2; g/turns > 320 {
		t.Errorf("a session holds %d bytes a turn; want at most 320", g/turns)
	}
}

// TestSessionCacheCutBodies sends every prefix of a turn's body to a
// session whose previous turn is cached: a body cut anywhere (right after
// the history key, inside the cached bytes, in the new message) must fail
// or parse as it does uncached, never panic.
func TestSessionCacheCutBodies(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range []API{wireapi.Chat, wireapi.Anthropic, wireapi.Responses, wireapi.Ollama} {
		body, err := os.ReadFile("testdata/adapters/repetition." + string(api) + ".json")
		if err != nil {
			t.Fatal(err)
		}
		h, _ := splitHistory(t, api, body)
		c := NewSessionCache(64 << 20)
		if _, err := e.ParseSession(c, "s", api, h.body(h.msgs[:len(h.msgs)-1])); err != nil {
			t.Fatal(err)
		}
		prev := c.get("s")
		full := h.body(h.msgs)
		for i := range full {
			c.put(prev)
			checkSame(t, e, c, "s", api, full[:i], fmt.Sprintf("%s cut at %d", api, i))
		}
	}
}

// TestPrefixHashChain: hashing a prefix in several extensions gives the
// one-pass hash and state, over block boundaries; any changed byte, in a
// full block or in the partial one, changes the hash.
func TestPrefixHashChain(t *testing.T) {
	src := make([]byte, 3*hashBlock+777)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range src {
		src[i] = byte(rng.IntN(256))
	}
	s := string(src)
	for _, tt := range []struct {
		name  string
		steps []int // prefix lengths, growing
	}{
		{"within a block", []int{10, 100, hashBlock - 1}},
		{"onto a boundary", []int{hashBlock - 5, hashBlock, 2 * hashBlock}},
		{"over blocks", []int{1, hashBlock + 1, 3*hashBlock + 700, len(s)}},
		{"empty first", []int{0, 2*hashBlock + 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := prefixHash{chain: 42}
			for _, n := range tt.steps {
				var sum uint64
				h, sum = h.extend(s[:n])
				once, want := prefixHash{chain: 42}.extend(s[:n])
				if h != once || sum != want {
					t.Fatalf("prefix %d: state %+v sum %x extended, %+v %x at once", n, h, sum, once, want)
				}
				if h.blocks != n/hashBlock {
					t.Fatalf("prefix %d: %d full blocks, want %d", n, h.blocks, n/hashBlock)
				}
			}
		})
	}
	_, want := prefixHash{chain: 42}.extend(s)
	for _, at := range []int{0, hashBlock - 1, hashBlock, 2*hashBlock + 5, len(s) - 1} {
		b := []byte(s)
		b[at]++
		if _, sum := (prefixHash{chain: 42}).extend(string(b)); sum == want {
			t.Errorf("byte %d changed, same hash", at)
		}
	}
	if _, sum := (prefixHash{chain: 43}).extend(s); sum == want {
		t.Error("another seed, same hash")
	}
}

// TestSessionCacheLongHistory grows a history of several hash blocks turn
// by turn, then edits one message early in it (in the first block) and
// one late (in the partial block): every turn must parse and judge as
// uncached, growing turns must hit, and edits must miss.
func TestSessionCacheLongHistory(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(120))
	if n := len(h.body(h.msgs)); n < 3*hashBlock {
		t.Fatalf("history of %d bytes: want several hash blocks", n)
	}
	c := NewSessionCache(64 << 20)
	for k := 1; k <= len(h.msgs); k++ {
		checkSame(t, e, c, "s", wireapi.Chat, h.body(h.msgs[:k]), fmt.Sprintf("grown to %d", k))
	}
	if st := c.Stats(); st.Hits != uint64(len(h.msgs)-1) || st.Misses != 1 {
		t.Fatalf("stats %+v after %d growing turns; want every turn after the first to hit", st, len(h.msgs))
	}
	for _, i := range []int{3, len(h.msgs) - 2} {
		msgs := slices.Clone(h.msgs)
		msgs[i] = editMessage(t, msgs[i], false)
		before := c.Stats().Misses
		checkSame(t, e, c, "s", wireapi.Chat, h.body(msgs), fmt.Sprintf("message %d edited", i))
		if c.Stats().Misses != before+1 {
			t.Errorf("message %d edited: served from the cache", i)
		}
		checkSame(t, e, c, "s", wireapi.Chat, h.body(h.msgs), "the original again") // a miss, then the cache holds it
	}
}

// TestShortCollapsed: the evidence text read from the beginning of an
// output is the one shorten(collapseSpace) makes of all of it, for texts
// with every kind of space, invalid UTF-8, and lengths around the cut.
func TestShortCollapsed(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pieces := []string{"a", "word", " ", "  ", "\t", "\n", "\r\n", "\v", "\u00a0", "\u2003", "é", "日本", "\xff", "\xe2\x80", strings.Repeat("x", 290), "…"}
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		for n := rng.IntN(80); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		for _, n := range []int{maxOutcome, 5, 40} {
			if got, want := string(appendShortCollapsed([]byte("x"), s, n)), "x"+shorten(collapseSpace(s), n); got != want {
				t.Fatalf("appendShortCollapsed(x, %q, %d) = %q, want %q", s, n, got, want)
			}
		}
	}
}

// TestSessionCacheReach grows a history past the detectors' reach
// (maxEvents calls) and ends it in a loop: every turn must judge as
// uncached, the loop included, while the cache holds no result before
// the reach and a digest for each one in it.
func TestSessionCacheReach(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(maxEvents+40))
	msgs := slices.Clone(h.msgs)
	call, res := string(msgs[len(msgs)-2]), string(msgs[len(msgs)-1])
	id := fmt.Sprintf("call_%d", maxEvents+39)
	for j := 0; j < 8; j++ { // the last call again and again, answered alike
		r := fmt.Sprintf("call_r%d", j)
		msgs = append(msgs, json.RawMessage(strings.ReplaceAll(call, id, r)), json.RawMessage(strings.ReplaceAll(res, id, r)))
	}
	c := NewSessionCache(64 << 20)
	var last Verdict
	for k := 2 * (maxEvents - 20); k <= len(msgs); k++ {
		got, _ := checkSame(t, e, c, "s", wireapi.Chat, h.body(msgs[:k]), fmt.Sprintf("grown to %d", k))
		last = e.Inspect(got)
	}
	if !last.Loop {
		t.Fatalf("the repeated call is no loop: %+v", last)
	}
	en := c.get("s")
	from, _ := e.reach(&Trajectory{Steps: en.steps, Start: en.start})
	if from < 40 || en.from != from {
		t.Fatalf("reach from step %d, entry says %d: want past the first 40 steps", from, en.from)
	}
	for s, st := range en.steps {
		for _, c := range st.Calls {
			if c.Result != "" || (s < from) == c.digested() {
				t.Fatalf("step %d (reach from %d): result %d bytes, digested %v", s, from, len(c.Result), c.digested())
			}
		}
	}
}

// TestSessionCacheErrorPatterns: an engine with error patterns reads
// whole results, so its cache keeps their text; an entry of another
// engine (a reloaded configuration) is not resumed.
func TestSessionCacheErrorPatterns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ErrorPatterns = []string{`line of output with some words 0123\n.*\n.*words`}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := splitHistory(t, wireapi.Chat, benchBody(30))
	c := NewSessionCache(64 << 20)
	for k := 1; k <= len(h.msgs); k++ {
		checkSame(t, e, c, "s", wireapi.Chat, h.body(h.msgs[:k]), fmt.Sprintf("grown to %d", k))
	}
	for s, st := range c.get("s").steps {
		for _, c := range st.Calls {
			if c.digested() || c.HasResult && c.Result == "" {
				t.Fatalf("step %d: result dropped for an engine with error patterns", s)
			}
		}
	}
	other, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	checkSame(t, other, c, "s", wireapi.Chat, h.body(h.msgs), "another engine")
	if st := c.Stats(); st.Hits != before.Hits || st.Misses != before.Misses+1 {
		t.Fatalf("stats %+v after %+v: another engine's turn must be a miss", st, before)
	}
}

// TestSessionCacheSyntaxErrors: a syntax error that moves from line to
// line as the code changes is debugging, not an error cycle, and telling
// needs the error's text (errorLocation): the cache keeps the results
// that name a syntax error, and judges such a history as uncached.
func TestSessionCacheSyntaxErrors(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := syntaxErrorHistory(8, 0)
	msgs := h.msgs
	c := NewSessionCache(64 << 20)
	for k := 1; k <= len(msgs); k++ {
		checkSame(t, e, c, "s", wireapi.Chat, h.body(msgs[:k]), fmt.Sprintf("grown to %d", k))
	}
	for s, st := range c.get("s").steps {
		for _, c := range st.Calls {
			if !c.IsError || c.Result == "" {
				t.Fatalf("step %d: error %v, result %q: want the syntax error's text kept", s, c.IsError, c.Result)
			}
		}
	}
}

// syntaxErrorHistory is turns calls of a script that fails with a syntax
// error on another line each time, the traceback padded with pad lines of
// output (the cache keeps such results' text, see keepsResult).
func syntaxErrorHistory(turns, pad int) history {
	msgs := []json.RawMessage{json.RawMessage(`{"role":"system","content":"You are a coding agent."}`), json.RawMessage(`{"role":"user","content":"Fix the parser."}`)}
	out := strings.Repeat("collecting the parser's modules\n", pad)
	for i := 0; i < turns; i++ {
		id := fmt.Sprintf("call_%d", i)
		args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("python parser_%d.py", i)})
		call, _ := json.Marshal(map[string]any{"role": "assistant", "content": "Running it again.", "tool_calls": []any{
			map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "bash", "arguments": string(args)}}}})
		res, _ := json.Marshal(map[string]any{"role": "tool", "tool_call_id": id, "content": fmt.Sprintf(
			"%sTraceback (most recent call last):\n  File \"parser_%d.py\", line %d\n    if x = 1:\n         ^\nSyntaxError: invalid syntax", out, i, 10+7*i)})
		msgs = append(msgs, call, res)
	}
	return history{api: wireapi.Chat, key: "messages", rest: map[string]json.RawMessage{"model": json.RawMessage(`"gpt-4o"`)}, msgs: msgs}
}

// writesHistory is a Responses history of turns steps, each an assistant
// message and a call writing a file of about 2 KB, answered: sent one
// item a turn, the call joins a step of the cached history.
func writesHistory(turns int) history {
	items := []json.RawMessage{json.RawMessage(`{"role":"user","content":"Write the service."}`)}
	content := strings.Repeat("def handler(request):\n    return respond(request)\n", 40)
	for i := 0; i < turns; i++ {
		id := fmt.Sprintf("call_%d", i)
		msg, _ := json.Marshal(map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": fmt.Sprintf("Writing module %d.", i)}}})
		args, _ := json.Marshal(map[string]string{"path": fmt.Sprintf("src/module_%d.py", i), "content": fmt.Sprintf("# module %d\n%s", i, content)})
		call, _ := json.Marshal(map[string]any{"type": "function_call", "call_id": id, "name": "write_file", "arguments": string(args)})
		out, _ := json.Marshal(map[string]any{"type": "function_call_output", "call_id": id, "output": "File written."})
		items = append(items, msg, call, out)
	}
	return history{api: wireapi.Responses, key: "input", rest: map[string]json.RawMessage{"model": json.RawMessage(`"gpt-4o"`)}, msgs: items}
}

// TestSessionCacheHeapMatchesCount: the bytes the cache counts are the
// memory its sessions keep alive, whether turns add one step or several
// (a turn's calls must not keep the parser's chunk of 64 alive), or one
// message: a result then answers a call of the cached steps, or a call
// joins the cached last step (Responses), and the text the cache keeps of
// them (a syntax error's, the call's) must be moved out of the parse's
// arena, whether the steps were copied or extended in place.
func TestSessionCacheHeapMatchesCount(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	bench, _ := splitHistory(t, wireapi.Chat, benchBody(60))
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	syntax, writes := syntaxErrorHistory(30, 20), writesHistory(20)
	for _, tt := range []struct {
		name    string
		h       history
		per     int  // messages a turn adds: one step, two; one message
		release bool // the trajectories are released (steps grown in place)
	}{
		{"bench", bench, 2, true}, {"bench", bench, 4, true}, {"bench", bench, 2, false}, {"bench", bench, 4, false},
		{"syntax errors", syntax, 1, true}, {"syntax errors", syntax, 1, false},
		{"writes", writes, 1, true}, {"writes", writes, 1, false},
	} {
		t.Run(fmt.Sprintf("%s, %d messages a turn, release %v", tt.name, tt.per, tt.release), func(t *testing.T) {
			h := tt.h
			bodies := make([][]byte, len(h.msgs)+1)
			for k := 1; k <= len(h.msgs); k++ {
				bodies[k] = h.body(h.msgs[:k])
			}
			const sessions = 40
			c := NewSessionCache(1 << 40)
			before := heap()
			for s := 0; s < sessions; s++ {
				for k := 2; k <= len(h.msgs); k += tt.per {
					tr, err := e.ParseSession(c, fmt.Sprint(s), h.api, bodies[k])
					if err != nil {
						t.Fatal(err)
					}
					if tt.release {
						tr.Release()
					}
				}
			}
			held, counted := int64(heap())-int64(before), c.Stats().Bytes
			t.Logf("%d sessions: %d bytes of heap, %d counted", sessions, held, counted)
			if held > counted*13/10 {
				t.Errorf("the sessions keep %d bytes alive, %.1fx the %d the cache counts", held, float64(held)/float64(counted), counted)
			}
			runtime.KeepAlive(c)
			runtime.KeepAlive(bodies)
		})
	}
}

// growingHistory is the history of e2e/load's growing sessions after
// turns turns: every call reads another part of another module, answered
// with about 1.3 KB of output.
func growingHistory(turns int) history {
	out := strings.Repeat("line of output with some words 0123\n", 36)
	msgs := []json.RawMessage{json.RawMessage(`{"role":"system","content":"You are a coding agent."}`), json.RawMessage(`{"role":"user","content":"Port the service."}`)}
	for i := range turns {
		args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("sed -n '%d,%dp' src/module_%d.py", i, i+40, i)})
		call, _ := json.Marshal(map[string]any{"role": "assistant", "content": "Looking at the next module.", "tool_calls": []any{
			map[string]any{"id": fmt.Sprintf("call_%d", i), "type": "function", "function": map[string]any{"name": "bash", "arguments": string(args)}}}})
		res, _ := json.Marshal(map[string]any{"role": "tool", "tool_call_id": fmt.Sprintf("call_%d", i), "content": fmt.Sprintf("module %d\n%s", i, out)})
		msgs = append(msgs, call, res)
	}
	return history{api: wireapi.Chat, key: "messages", rest: map[string]json.RawMessage{"model": json.RawMessage(`"fake-model"`)}, msgs: msgs}
}

// sessionHeap grows sessions sessions of h turn by turn from its first
// from messages (sent at once), releasing each trajectory and returns the heap each keeps alive, as
// runtime.MemStats sees it, and the bytes the cache counts for one.
func sessionHeap(t *testing.T, e *Engine, h history, from, sessions int) (held, counted int64) {
	t.Helper()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	c := NewSessionCache(1 << 40)
	heap() // and the pools emptied
	before := heap()
	for s := 0; s < sessions; s++ {
		for k := from; k <= len(h.msgs); k += 2 {
			tr, err := e.ParseSession(c, fmt.Sprint(s), wireapi.Chat, h.body(h.msgs[:k]))
			if err != nil {
				t.Fatal(err)
			}
			tr.Release() // as the proxy does
		}
	}
	after := heap()
	runtime.KeepAlive(c)
	return (int64(after) - int64(before)) / int64(sessions), c.Stats().Bytes / int64(sessions)
}

// TestSessionCacheHeapPerSession: a session of a realistic history of
// about 150 KB (the growing workload at 100 turns, the mean of turns
// 1..200; or 57 turns of 2.3 KB of output each) keeps at most max bytes
// of heap, as runtime.MemStats sees it, grown turn by turn. Other lengths
// are logged for the record (max 0).
func TestSessionCacheHeapPerSession(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of many long sessions: skipped under -short")
	}
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	bench := func(turns int) history {
		h, _ := splitHistory(t, wireapi.Chat, benchBody(turns))
		return h
	}
	for _, tt := range []struct {
		name string
		h    history
		from int // messages of the first request
		max  int64
	}{
		{"growing 20 turns", growingHistory(20), 2, 0},
		{"growing 100 turns", growingHistory(100), 2, 28 << 10},
		{"growing 200 turns", growingHistory(200), 2, 0},
		{"bench 20 turns", bench(20), 2, 0},
		{"bench 57 turns", bench(57), 2, 17 << 10},
		{"bench 200 turns", bench(200), 2, 0},
		{"bench 1000 turns", bench(1000), 1900, 0},
	} {
		held, counted := sessionHeap(t, e, tt.h, tt.from, 20)
		t.Logf("%s (%d KB): %d bytes of heap a session, %d counted", tt.name, len(tt.h.body(tt.h.msgs))>>10, held, counted)
		if tt.max > 0 && held > tt.max {
			t.Errorf("%s: a session keeps %d bytes of heap; want at most %d", tt.name, held, tt.max)
		}
	}
}

// chatTurn is an assistant message calling bash with cmd (id call_i) and,
// when res is not "", the tool message answering it.
func chatTurn(i int, cmd, res string) []json.RawMessage {
	args, _ := json.Marshal(map[string]string{"command": cmd})
	return toolTurn(i, "bash", string(args), res)
}

// toolTurn is chatTurn of a call of tool with the JSON arguments args.
func toolTurn(i int, tool, args, res string) []json.RawMessage {
	id := fmt.Sprintf("call_%d", i)
	call, _ := json.Marshal(map[string]any{"role": "assistant", "content": "Working on it.", "tool_calls": []any{
		map[string]any{"id": id, "type": "function", "function": map[string]any{"name": tool, "arguments": args}}}})
	if res == "" {
		return []json.RawMessage{call}
	}
	out, _ := json.Marshal(map[string]any{"role": "tool", "tool_call_id": id, "content": res})
	return []json.RawMessage{call, out}
}

// zoneCase is a history whose verdict reports the result of a call before
// the last three and not the latest answered: out of the window, or in it
// (inWindow) where the call repeats an earlier one, each by a rule that
// may (see evidenceZone).
type zoneCase struct {
	cacheCase
	inWindow bool
}

// zoneHistories are the zoneCases for a window of w steps.
func zoneHistories(w int) (out []zoneCase) {
	for _, c := range []struct {
		name     string
		inWindow bool
		msgs     func() []json.RawMessage
	}{
		{"a repeated call answered long ago (tool_repetition's run)", false, func() []json.RawMessage {
			var m []json.RawMessage
			for i := 0; i < 4; i++ {
				m = append(m, chatTurn(i, "cat setup.py", "No such file or directory: setup.py\n")...)
			}
			for i := 4; i < w+10; i++ { // never answered
				m = append(m, chatTurn(i, "cat setup.py", "")...)
			}
			return m
		}},
		{"a state restored long ago (edit_undo)", false, func() []json.RawMessage {
			var m []json.RawMessage
			for i := 0; i < 6; i++ {
				m = append(m, chatTurn(2*i, fmt.Sprintf("sed -i 's/x/y%d/' app.py", i), "")...)
				m = append(m, chatTurn(2*i+1, "git checkout app.py", fmt.Sprintf("Updated 1 path from the index (%d)\n", i))...)
			}
			for i := 12; i < w+20; i++ {
				m = append(m, chatTurn(i, fmt.Sprintf("cat docs/page_%d.md", i), fmt.Sprintf("page %d\nsome text\nmore text\n", i))...)
			}
			return m
		}},
		{"a group that stopped repeating in the window (tool_repetition)", true, func() []json.RawMessage {
			var m []json.RawMessage
			for i := 0; i < 5; i++ {
				m = append(m, chatTurn(2*i, "cat status", jobStatus)...)
				m = append(m, chatTurn(2*i+1, fmt.Sprintf("ls dir%d", i), fmt.Sprintf("file%d.go", i))...)
			}
			for i := 10; i < 14; i++ {
				m = append(m, chatTurn(i, fmt.Sprintf("ls dir_%d", i), fmt.Sprintf("dir %d\na.txt\nb.txt\n", i))...)
			}
			return m
		}},
		{"drifting calls whose latest answer is older than the last three (param_drift)", true, func() []json.RawMessage {
			var m []json.RawMessage
			read := func(i int) string { return fmt.Sprintf(`{"path":"big.log","offset":%d,"limit":50}`, 4000+i) }
			for i := 0; i < 4; i++ {
				m = append(m, toolTurn(i, "read_file", read(i), "Error: offset 4000 is beyond the end of big.log (3120 lines)")...)
			}
			m = append(m, chatTurn(4, "cat notes.md", "notes\nlower the offset\n")...)
			for i := 5; i < 8; i++ { // never answered
				m = append(m, toolTurn(i, "read_file", read(i), "")...)
			}
			return m
		}},
	} {
		msgs := append([]json.RawMessage{json.RawMessage(`{"role":"user","content":"Fix the build."}`)}, c.msgs()...)
		h := history{api: wireapi.Chat, key: "messages", rest: map[string]json.RawMessage{"model": json.RawMessage(`"gpt-4o"`)}, msgs: msgs}
		out = append(out, zoneCase{cacheCase{c.name, h}, c.inWindow})
	}
	return out
}

// TestSessionCacheEvidenceZone grows histories turn by turn whose verdict
// reports the result of a call out of the window and before the last
// three calls, each by the rule that may (see evidenceZone): the cache
// must keep that call's evidence text, and judge every turn as uncached.
func TestSessionCacheEvidenceZone(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := e.cfg.Window
	for _, tt := range zoneHistories(w) {
		t.Run(tt.name, func(t *testing.T) {
			h, msgs := tt.h, tt.h.msgs
			c := NewSessionCache(64 << 20)
			var want *Trajectory
			for k := 1; k <= len(msgs); k++ {
				_, want = checkSame(t, e, c, "s", wireapi.Chat, h.body(msgs[:k]), fmt.Sprintf("grown to %d", k))
			}
			if c.Stats().Hits == 0 {
				t.Fatal("no turn was served from the cache")
			}
			// The case is what it says: a result reported is only that of
			// calls the zone keeps for the rule the case is about: out of
			// the window, or in it and repeating, before the last three
			// calls and not the latest answered.
			var calls []callAt
			answered := noCall
			for s, st := range want.Steps {
				for k := range st.Calls {
					calls = append(calls, callAt{s, k})
					if st.Calls[k].HasResult {
						answered = callAt{s, k}
					}
				}
			}
			found := false
			for _, d := range e.Inspect(want).Detections {
				if d.Evidence.Result == "" {
					continue
				}
				only := true
				for i, at := range calls {
					c := &want.Steps[at.s].Calls[at.k]
					inWindow := at.s >= len(want.Steps)-w
					if c.HasResult && c.outcome() == d.Evidence.Result && (inWindow != tt.inWindow || i >= len(calls)-3 || tt.inWindow && at == answered) {
						only = false
					}
				}
				found = found || only
			}
			if !found {
				t.Fatalf("no detection reports only the result the case is about: %+v", e.Inspect(want).Detections)
			}
		})
	}
}

// TestSessionCacheLateResults: calls answered turns after they were made
// (an agent running tools in the background), one at a time and more of
// them at once than the entry lists, and one answered after it left the
// window a result pairs with: every turn must judge as uncached and list
// the steps still waiting (checkSame).
func TestSessionCacheLateResults(t *testing.T) {
	e, err := NewEngine(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	answer := func(i int) json.RawMessage {
		out, _ := json.Marshal(map[string]any{"role": "tool", "tool_call_id": fmt.Sprintf("call_%d", i), "content": fmt.Sprintf("done %d", i)})
		return out
	}
	msgs := []json.RawMessage{json.RawMessage(`{"role":"user","content":"Build it."}`)}
	waiting := []int{}
	for i := range 90 {
		if i%7 == 3 || i >= 20 && i < 26 || i == 30 {
			msgs = append(msgs, chatTurn(i, fmt.Sprintf("make target_%d &", i), "")...) // answered later
			waiting = append(waiting, i)
		} else {
			msgs = append(msgs, chatTurn(i, fmt.Sprintf("ls dir_%d", i), fmt.Sprintf("file_%d", i))...)
		}
		// Now and then the oldest waiting calls are answered, and call
		// 30 only once it is out of the last lookBack steps.
		if i%9 == 8 || i == 27 || i == 89 {
			for len(waiting) > 0 && (waiting[0] != 30 || i > 30+lookBack) {
				msgs = append(msgs, answer(waiting[0]))
				waiting = waiting[1:]
			}
		}
	}
	h := history{api: wireapi.Chat, key: "messages", rest: map[string]json.RawMessage{"model": json.RawMessage(`"m"`)}, msgs: msgs}
	c := NewSessionCache(64 << 20)
	overflowed := false
	for k := 1; k <= len(msgs); k++ {
		got, _ := checkSame(t, e, c, "s", wireapi.Chat, h.body(msgs[:k]), fmt.Sprintf("grown to %d", k))
		got.Release()
		overflowed = overflowed || c.get("s").unanswered.n < 0
	}
	if st := c.Stats(); st.Hits != uint64(len(msgs)-1) {
		t.Errorf("stats %+v: want every turn after the first served from the cache", st)
	}
	if !overflowed {
		t.Error("never more unanswered steps than the entry lists: the test misses that case")
	}
}
