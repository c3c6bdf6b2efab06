package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/proxy"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// growingSessions writes, for every corpus and adapter history, the
// requests of its last turns in order (each the one before plus the next
// messages) as one session: what an agent sends, and what the session cache
// serves from the turn before.
func growingSessions(t *testing.T) string {
	t.Helper()
	var recs []Record
	add := func(id, api string, body []byte) {
		key := "messages"
		if a := wireapi.Lookup(wireapi.Name(api)); a != nil {
			key = a.History
			if a.Wrap != "" {
				key = a.Wrap + "." + key
			}
		}
		msgs := gjson.GetBytes(body, key).Array()
		for k := max(1, len(msgs)-8); k <= len(msgs); k++ {
			raws := make([]string, k)
			for i := range raws {
				raws[i] = msgs[i].Raw
			}
			req, err := sjson.SetRawBytes(bytes.Clone(body), key, []byte("["+strings.Join(raws, ",")+"]"))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, Record{ID: fmt.Sprintf("%s/%d", id, k), Request: req, Session: id, API: api})
		}
	}
	files, _ := filepath.Glob("../inspect/testdata/corpus/*.jsonl")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if r := gjson.Parse(line); r.Get("request.messages").IsArray() && r.Get("response_sse").String() == "" {
				add(r.Get("id").String(), "", []byte(r.Get("request").Raw))
			}
		}
	}
	files, _ = filepath.Glob("../inspect/testdata/adapters/*.json")
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		api := strings.TrimPrefix(filepath.Ext(strings.TrimSuffix(f, ".json")), ".")
		add(filepath.Base(f), api, body)
	}
	if len(recs) < 200 {
		t.Fatalf("%d growing-session records; the corpus is missing", len(recs))
	}
	var b bytes.Buffer
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "sessions.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReplaySameWithSessionCache: `loopguard replay` prints the same lines
// with the session cache on and off, over the corpus and over growing
// sessions, which the cache serves from their previous turn.
func TestReplaySameWithSessionCache(t *testing.T) {
	files := append(corpusFiles(t), growingSessions(t))
	run := func(cacheMB int) string {
		cfg := proxy.DefaultConfig()
		cfg.Detect.SessionCacheMB = cacheMB
		var out, errOut bytes.Buffer
		if code := Main(cfg, files, &out, &errOut); code != 0 {
			t.Fatalf("Main = %d (stderr %s)", code, errOut.String())
		}
		return out.String()
	}
	on, off := run(256), run(0)
	if on != off {
		a, b := strings.Split(on, "\n"), strings.Split(off, "\n")
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("line %d differs:\ncache on:  %s\ncache off: %s", i+1, a[i], b[i])
			}
		}
		t.Fatalf("%d lines with the cache, %d without", len(a), len(b))
	}
	if n := strings.Count(on, `"loop":true`); n < 50 {
		t.Fatalf("only %d loops in the output: the comparison says little", n)
	}

	// The growing sessions were served from the cache.
	r, err := New(proxy.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := os.Open(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ReadRecords(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if res := r.Run(rec); res.Error != "" {
			t.Fatalf("%s: %s", rec.ID, res.Error)
		}
	}
	hits, misses := cacheMetric(t, r, "hits"), cacheMetric(t, r, "misses")
	if hits < float64(len(recs))/2 {
		t.Errorf("%v hits and %v misses over %d growing-session requests; want most served from the cache", hits, misses, len(recs))
	}
	t.Logf("growing sessions: %d requests, %v cache hits, %v misses", len(recs), hits, misses)
}

func cacheMetric(t *testing.T, r *Runner, name string) float64 {
	t.Helper()
	resp, err := http.Get(r.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^loopguard_inspect_cache_` + name + `_total (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no loopguard_inspect_cache_%s_total in /metrics (status %d)", name, resp.StatusCode)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
