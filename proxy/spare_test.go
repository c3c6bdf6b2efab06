package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Streamed requests one after another run on a spare or two, which end with
// the server; a goroutine per request would have grown a fresh stack every
// time. A request that is not streamed runs where it is.
func TestSparesReusedAndStopped(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswer)
	})
	srv, base := startProxy(t, func(c *Config) { c.Upstream.URL = up.URL })
	for i := range 20 {
		body := fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":"turn %d"}]}`, i)
		if resp, _ := postChat(t, base, "spares", body); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		<-got
	}
	// A spare that has just answered may not be back at its receive when
	// the next request comes, so a few may start; a goroutine per request
	// leaves none.
	if n := srv.spares.n.Load(); n < 1 || n > 4 {
		t.Errorf("20 requests one after another left %d spares; want 1 to 4", n)
	}
	before := srv.spares.n.Load()
	if resp, _ := postChat(t, base, "spares", `{"model":"m","messages":[{"role":"user","content":"not streamed"}]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	<-got
	if n := srv.spares.n.Load(); n != before {
		t.Errorf("a request that is not streamed started a spare (%d -> %d)", before, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); srv.spares.n.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d spares alive after Shutdown", srv.spares.n.Load())
		}
	}
}

// Past the cap, a pipeline still runs, on a goroutine of its own.
func TestSparesPastTheCap(t *testing.T) {
	sp := newSpares()
	sp.max = 0
	ran := make(chan struct{})
	c := &guardCall{done: make(chan any, 1)}
	go func() { sp.start(c); close(ran) }()
	<-ran
	if n := sp.n.Load(); n != 0 {
		t.Errorf("%d spares past a cap of 0", n)
	}
	if p := <-c.done; p == nil {
		t.Error("a call without a server did not panic on its goroutine")
	}
}

func TestLooksStreamed(t *testing.T) {
	history := `"messages":[` + strings.Repeat(`{"role":"user","content":"say \"stream\": true"},`, 200) + `{"role":"user","content":"go"}]`
	for _, tt := range []struct {
		name string
		body string
		want bool
	}{
		{"first", `{"stream":true,"model":"m",` + history + `}`, true},
		{"last, spaced as Python writes it", `{"model": "m", ` + history + `, "stream": true}`, true},
		{"false", `{"stream":false,` + history + `}`, false},
		{"absent", `{"model":"m",` + history + `}`, false},
		{"stream_options only", `{"stream_options":{"include_usage":true},` + history + `}`, false},
		{"inside a string", `{"model":"m",` + history + `}`, false},
		{"between a long history and long tools", `{` + history + `,"stream":true,"tools":[` + strings.Repeat(`{"type":"function","function":{"name":"f"}},`, 100) + `{}]}`, false},
		{"small body", `{"messages":[],"stream" : true}`, true},
		{"key alone", `"stream":true`, true},
		{"key cut", `{"stream`, false},
		{"no value", `{"stream":`, false},
		{"m everywhere", `{"model":"m","messages":[{"role":"system","content":"mmm \"stream\" m"}],"stream":true}`, true},
		{"empty", ``, false},
	} {
		if got := looksStreamed([]byte(tt.body)); got != tt.want {
			t.Errorf("%s: looksStreamed = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestLooksStreamedFor: a request of an API that streams by default
// (Ollama's) looks streamed unless it says "stream": false.
func TestLooksStreamedFor(t *testing.T) {
	for _, tt := range []struct {
		name string
		api  *wireAPI
		body string
		want bool
	}{
		{"ollama, absent", ollamaAPI, `{"model":"m","messages":[]}`, true},
		{"ollama, false", ollamaAPI, `{"model":"m","stream": false,"messages":[]}`, false},
		{"ollama, true", ollamaAPI, `{"model":"m","stream":true,"messages":[]}`, true},
		{"chat, absent", chatAPI, `{"model":"m","messages":[]}`, false},
		{"chat, true", chatAPI, `{"model":"m","stream":true,"messages":[]}`, true},
	} {
		if got := looksStreamedFor(tt.api, []byte(tt.body)); got != tt.want {
			t.Errorf("%s: looksStreamedFor = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// FuzzHasStream holds hasStream to a search for the whole key with
// bytes.Index, as it was.
func FuzzHasStream(f *testing.F) {
	for _, s := range []string{`{"stream":true}`, `"stream" : true`, `mm"stream"`, `{"m":"stream","stream":false}`, `stream"`, `"stream"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, val := range []string{"true", "false"} {
			if got, want := hasStream(b, val), hasStreamRef(b, val); got != want {
				t.Errorf("hasStream(%q, %s) = %v; the search for the key says %v", b, val, got, want)
			}
		}
	})
}

func hasStreamRef(b []byte, val string) bool {
	for {
		i := bytes.Index(b, []byte(`"stream"`))
		if i < 0 {
			return false
		}
		v := bytes.TrimLeft(b[i+len(`"stream"`):], " \t\r\n")
		b = b[i+1:] // occurrences may overlap: "stream"stream":
		if len(v) > 0 && v[0] == ':' && bytes.HasPrefix(bytes.TrimLeft(v[1:], " \t\r\n"), []byte(val)) {
			return true
		}
	}
}

// BenchmarkLooksStreamed reads a 27 KB agent request's ends for "stream".
func BenchmarkLooksStreamed(b *testing.B) {
	body := chatBody(27<<10, false)
	b.ReportAllocs()
	for b.Loop() {
		looksStreamed(body)
	}
}
