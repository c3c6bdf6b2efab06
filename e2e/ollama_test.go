package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/internal/testproc"
	"github.com/tidwall/gjson"
)

// The tests in this file put loopguard in front of a real Ollama
// (shared/ollama beside the repository, serving shared/llama/tiny.gguf)
// and speak Ollama's own API to it. Without the binary they skip, unless
// LOOPGUARD_REQUIRE_OLLAMA is set (then they fail: a skipped suite must
// not read as a pass where Ollama is expected).

const requireOllama = "LOOPGUARD_REQUIRE_OLLAMA"

// ollamaServer is one `ollama serve` with its state in a temporary
// directory, and the models "tiny" (default sampling) and "tiny-greedy"
// (repeat_penalty 1: greedy streams repeat one phrase exactly).
type ollamaServer struct {
	URL  string
	proc *testproc.Process
}

// findShared returns dir under shared/ beside the repository (its parent,
// or its grandparent for a worktree one level deeper), "" if absent.
func findShared(t *testing.T, name string, files ...string) string {
	wd, _ := os.Getwd()
	root := wd
	for !exists(filepath.Join(root, "go.mod")) && filepath.Dir(root) != root {
		root = filepath.Dir(root)
	}
	for d, i := filepath.Dir(root), 0; i < 2; d, i = filepath.Dir(d), i+1 {
		ok := true
		for _, f := range files {
			ok = ok && exists(filepath.Join(d, "shared", name, f))
		}
		if ok {
			return filepath.Join(d, "shared", name)
		}
	}
	return ""
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func startOllama(t *testing.T) *ollamaServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Ollama and runs a model: skipped under -short")
	}
	dir, llama := findShared(t, "ollama", "ollama", "Modelfile.tmpl"), findShared(t, "llama", "tiny.gguf")
	if dir == "" || llama == "" {
		if os.Getenv(requireOllama) != "" {
			t.Fatalf("ollama missing: no shared/ollama/ollama and shared/llama/tiny.gguf beside the repository, and %s is set", requireOllama)
		}
		t.Skipf("ollama missing: no shared/ollama/ollama and shared/llama/tiny.gguf beside the repository (set %s to fail instead)", requireOllama)
	}
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	env := map[string]string{
		"HOME": filepath.Join(tmp, "home"), "OLLAMA_HOST": fmt.Sprintf("127.0.0.1:%d", port), "OLLAMA_MODELS": filepath.Join(tmp, "models"),
		"OLLAMA_NO_CLOUD": "1", "OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KEEP_ALIVE": "1h", "OLLAMA_CONTEXT_LENGTH": "4096",
	}
	for k, v := range env {
		t.Setenv(k, v) // the server inherits the environment
	}
	bin := filepath.Join(dir, "ollama")
	proc, err := testproc.Start(bin, []string{"serve"}, filepath.Join(tmp, "ollama.log"))
	if err != nil {
		t.Fatal(err)
	}
	s := &ollamaServer{URL: fmt.Sprintf("http://127.0.0.1:%d", port), proc: proc}
	t.Cleanup(func() {
		proc.Stop()
		if t.Failed() {
			t.Logf("ollama log tail:\n%s", proc.LogTail(3000))
		}
	})
	if err := proc.WaitReady(20*time.Second, 100*time.Millisecond, func() error {
		resp, err := http.Get(s.URL + "/api/version")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(dir, "Modelfile.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(tmpl), "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	mf := "FROM " + filepath.Join(llama, "tiny.gguf") + "\n" + strings.Join(lines, "\n")
	for name, extra := range map[string]string{"tiny": "", "tiny-greedy": "\nPARAMETER repeat_penalty 1\n"} {
		p := filepath.Join(tmp, name+".Modelfile")
		if err := os.WriteFile(p, []byte(mf+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "create", name, "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("ollama create %s: %v\n%s", name, err, out)
		}
	}
	return s
}

// post sends body to base+path and returns the status, content type and
// whole answer.
func ollamaPost(t *testing.T, base, path, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}, Timeout: 120 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s%s: %v", base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s%s: read: %v", base, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// ollamaTiming are the members that differ between two runs of one
// request: when it ran, how long it took, and the tool call ids Ollama
// draws at random.
var ollamaTiming = regexp.MustCompile(`"(created_at|total_duration|load_duration|prompt_eval_duration|eval_duration)":("[^"]*"|[0-9]+)|"(id)":"call_[0-9a-z]+"`)

// ollamaToolSchema makes the random model write a tool call (the
// Modelfile's template turns it into one).
const ollamaToolSchema = `"tools":[{"type":"function","function":{"name":"ls","description":"list","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}],` +
	`"format":{"type":"object","properties":{"name":{"const":"ls"},"arguments":{"type":"object","properties":{"path":{"enum":["src","."]}},"required":["path"]}},"required":["name","arguments"]},`

func TestOllama(t *testing.T) {
	o := startOllama(t)
	lg := startLoopguard(t, o.URL+"/v1", nil)

	t.Run("Transparent", func(t *testing.T) {
		for _, tt := range []struct{ name, body string }{
			{"text", `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"hi"}],"options":{"num_predict":24,"temperature":0,"seed":1}}`},
			{"text streamed", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":24,"temperature":0,"seed":1}}`},
			{"tool call", `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"list files"}],` + ollamaToolSchema + `"options":{"num_predict":80,"temperature":0,"seed":2}}`},
			{"tool call streamed", `{"model":"tiny","messages":[{"role":"user","content":"list files"}],` + ollamaToolSchema + `"options":{"num_predict":80,"temperature":0,"seed":2}}`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				ds, dh, direct := ollamaPost(t, o.URL, "/api/chat", tt.body, nil)
				ls, lh, through := ollamaPost(t, lg.URL, "/api/chat", tt.body, nil)
				if ds != 200 || ls != 200 || dh.Get("Content-Type") != lh.Get("Content-Type") {
					t.Fatalf("direct %d %s, through %d %s", ds, dh.Get("Content-Type"), ls, lh.Get("Content-Type"))
				}
				d, l := ollamaTiming.ReplaceAll(direct, []byte(`"$1$3":0`)), ollamaTiming.ReplaceAll(through, []byte(`"$1$3":0`))
				if !bytes.Equal(d, l) {
					t.Errorf("through loopguard (timing members and call ids zeroed):\n%s\ndirect:\n%s", l, d)
				}
				if strings.Contains(tt.name, "tool") && !bytes.Contains(through, []byte(`"tool_calls"`)) {
					t.Errorf("no tool call in %s", through)
				}
				t.Logf("%s: %d bytes, %d lines, identical but for timing and call ids", lh.Get("Content-Type"), len(through), bytes.Count(through, []byte("\n")))
			})
		}
	})

	t.Run("LoopWarnedThenEnded", func(t *testing.T) {
		history := func(n int, stream string) string {
			var b strings.Builder
			b.WriteString(`{"model":"tiny",` + stream + `"options":{"num_predict":8,"seed":1},"messages":[{"role":"user","content":"Fix the build."}`)
			for i := 0; i < n; i++ {
				b.WriteString(`,{"role":"assistant","content":"","tool_calls":[{"function":{"name":"bash","arguments":{"command":"make build"}}}]}`)
				b.WriteString(`,{"role":"tool","tool_name":"bash","content":"make: *** No rule to make target 'build'.  Stop."}`)
			}
			return b.String() + `]}`
		}
		var actions []string
		for n := 1; n <= 6; n++ {
			stream := `"stream":false,`
			if n == 6 {
				stream = "" // Ollama streams by default: so does LOOP_DETECTED
			}
			status, h, answer := ollamaPost(t, lg.URL, "/api/chat", history(n, stream), map[string]string{"X-Session-ID": "ollama-loop"})
			if status != 200 {
				t.Fatalf("%d calls: status %d: %s", n, status, answer)
			}
			actions = append(actions, h.Get("X-Loopguard-Action"))
			if n == 6 {
				lines := strings.Split(strings.TrimSpace(string(answer)), "\n")
				if h.Get("Content-Type") != "application/x-ndjson" || !strings.HasPrefix(gjson.Get(lines[0], "message.content").String(), "LOOP_DETECTED:") ||
					!gjson.Get(lines[len(lines)-1], "done").Bool() {
					t.Errorf("the last answer is not a native LOOP_DETECTED stream: %s", answer)
				}
			}
		}
		t.Logf("actions: %v", actions)
		if !contains(actions, "warn") || actions[len(actions)-1] != "terminate" {
			t.Errorf("actions %v; want a warning, then terminate", actions)
		}
	})

	t.Run("DegenerateStreamCut", func(t *testing.T) {
		for _, model := range []string{"tiny-greedy", "tiny"} {
			t.Run(model, func(t *testing.T) {
				body := `{"model":"` + model + `","messages":[{"role":"user","content":"Tell me a story."}],"options":{"num_predict":6000,"temperature":0,"seed":3}}`
				// Room for a loaded machine, where the tiny model made
				// 4 tokens a second; uncut, it would end at num_predict.
				ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "POST", lg.URL+"/api/chat", strings.NewReader(body))
				c := &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}}
				start := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var last string
				n := 0
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				for sc.Scan() {
					if !gjson.Valid(sc.Text()) {
						t.Fatalf("line %d is not JSON: %q", n, sc.Text())
					}
					last, n = sc.Text(), n+1
				}
				resp.Body.Close()
				cut := time.Now()
				if gjson.Get(last, "done_reason").String() != "loopguard_cut" || !gjson.Get(last, "done").Bool() {
					t.Fatalf("not cut after %d lines in %v; last line %s", n, cut.Sub(start), last)
				}
				// With one slot (OLLAMA_NUM_PARALLEL=1), a request waits while
				// the runner still generates: answered within 3 s (a loaded
				// machine's one token, far from the thousands left), it is
				// idle.
				_, _, one := ollamaPost(t, o.URL, "/api/generate", `{"model":"`+model+`","prompt":"x","stream":false,"options":{"num_predict":1}}`, nil)
				idle := time.Since(cut)
				t.Logf("cut after %d lines in %v (%s); a one-token request answered %v after the cut", n, cut.Sub(start).Round(time.Millisecond),
					gjson.Get(last, "loopguard_cut.category"), idle.Round(time.Millisecond))
				if idle > 3*time.Second || !gjson.GetBytes(one, "done").Bool() {
					t.Errorf("the runner was busy %v after the cut (want under 3s): %s", idle, one)
				}
			})
		}
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
