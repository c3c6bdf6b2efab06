// Package llamaserver runs llama.cpp's real llama-server with a tiny
// random-weight model for tests, so that they meet its real HTTP, SSE
// framing, tool-call parser, slots and cancellation instead of an imitation.
//
// The binary and the model live in shared/llama/ beside the repository (the
// repository's parent directory, or the one above it for a git worktree
// kept in a subdirectory); LOOPGUARD_LLAMA_DIR names another directory
// holding llama-server and tiny.gguf. When they are missing the test is
// skipped, so that a fresh clone with nothing beside it passes, unless
// LOOPGUARD_REQUIRE_LLAMA is set (CI sets it: there a skipped suite would
// read as a pass) or LOOPGUARD_LLAMA_DIR names the directory, in which case
// it fails.
package llamaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loopguard/loopguard/internal/testproc"
)

// EnvDir names a directory holding llama-server and tiny.gguf, used
// instead of shared/llama beside the repository.
const EnvDir = "LOOPGUARD_LLAMA_DIR"

// EnvRequire, when set to anything but "" or "0", turns a missing
// llama-server or model into a test failure instead of a skip.
const EnvRequire = "LOOPGUARD_REQUIRE_LLAMA"

// Options are the server's command-line settings that tests vary.
type Options struct {
	// Slots is -np, the number of sequences decoded in parallel (default 4).
	Slots int
	// Context is -c, the context size in tokens shared by the slots
	// (default 65536, 16,384 per slot with 4 slots).
	Context int
}

// Server is a running llama-server owned by one test.
type Server struct {
	// URL is the base URL on loopback, without /v1.
	URL  string
	proc *testproc.Process
	http *http.Client
}

// Start launches llama-server for tb on a free loopback port, waits until
// /health answers 200 and registers its shutdown with tb.Cleanup.
func Start(tb testing.TB, o Options) *Server {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts a real llama-server and runs a model: skipped under -short")
	}
	dir, err := findDir()
	if err != nil {
		if missingFails(os.Getenv) {
			tb.Fatalf("llamaserver: %v", err)
		}
		tb.Skipf("llamaserver: %v; set %s=1 to make this a failure", err, EnvRequire)
	}
	if o.Slots == 0 {
		o.Slots = 4
	}
	if o.Context == 0 {
		o.Context = 65536
	}
	logDir := tb.TempDir()
	var lastErr error
	// A free port can be taken between probing and binding; try a few.
	for range 5 {
		s, err := start(dir, logDir, o)
		if err == nil {
			tb.Cleanup(func() {
				s.Stop()
				if tb.Failed() {
					tb.Logf("llama-server log tail:\n%s", s.proc.LogTail(4000))
				}
			})
			return s
		}
		lastErr = err
	}
	tb.Fatalf("llamaserver: %v", lastErr)
	return nil
}

// missingFails reports whether a missing llama-server fails the test rather
// than skipping it: when CI requires it, or when EnvDir names a directory
// that does not hold it.
func missingFails(getenv func(string) string) bool {
	if r := getenv(EnvRequire); r != "" && r != "0" {
		return true
	}
	return getenv(EnvDir) != ""
}

// findDir locates the directory holding llama-server and tiny.gguf.
func findDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, check(d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	// Tests run in their package's directory: climb to the module root,
	// then look for shared/llama in the directories above it.
	root := wd
	for !exists(filepath.Join(root, "go.mod")) {
		up := filepath.Dir(root)
		if up == root {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
		root = up
	}
	// The parent holds shared/ for a checkout; a git worktree kept one
	// level deeper (worktrees/name) finds it in the grandparent.
	var tried []string
	for d, i := filepath.Dir(root), 0; i < 2; d, i = filepath.Dir(d), i+1 {
		cand := filepath.Join(d, "shared", "llama")
		if check(cand) == nil {
			return cand, nil
		}
		tried = append(tried, cand)
	}
	return "", fmt.Errorf("llama-server binary missing: no llama-server and tiny.gguf in %s (the repository's parent directory must hold shared/llama; or set %s)",
		strings.Join(tried, " or "), EnvDir)
}

func check(dir string) error {
	for _, f := range []string{"llama-server", "tiny.gguf"} {
		if !exists(filepath.Join(dir, f)) {
			return fmt.Errorf("llama-server binary missing: %s not found", filepath.Join(dir, f))
		}
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func start(dir, logDir string, o Options) (*Server, error) {
	port, err := testproc.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		URL:  "http://127.0.0.1:" + strconv.Itoa(port),
		http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second},
	}
	s.proc, err = testproc.Start(filepath.Join(dir, "llama-server"), []string{
		"-m", filepath.Join(dir, "tiny.gguf"), "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--jinja", "-c", strconv.Itoa(o.Context), "-np", strconv.Itoa(o.Slots),
		"--metrics", "--slots", "-t", "2", "--no-warmup"},
		filepath.Join(logDir, "llama-"+strconv.Itoa(port)+".log"))
	if err != nil {
		return nil, err
	}
	if err := s.proc.WaitReady(30*time.Second, 50*time.Millisecond, s.healthy); err != nil {
		s.Stop()
		return nil, fmt.Errorf("llama-server on %s: %w; log tail: %s", s.URL, err, s.proc.LogTail(2000))
	}
	return s, nil
}

// Stop kills the server and waits for it. It is safe to call twice.
func (s *Server) Stop() { s.proc.Stop() }

// healthy asks /health, which answers 200 once the model is loaded.
func (s *Server) healthy() error {
	resp, err := s.http.Get(s.URL + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/health: status %d", resp.StatusCode)
	}
	return nil
}

// Slot is one entry of GET /slots.
type Slot struct {
	ID           int  `json:"id"`
	IsProcessing bool `json:"is_processing"`
	// IDTask numbers the slot's last task; tasks are numbered in order.
	IDTask int `json:"id_task"`
	// NextToken[0].NDecoded is how many tokens the slot's last task
	// generated (so far, while it runs).
	NextToken []struct {
		NDecoded int `json:"n_decoded"`
	} `json:"next_token"`
}

// Decoded is how many tokens the slot's last task generated.
func (sl Slot) Decoded() int {
	if len(sl.NextToken) == 0 {
		return 0
	}
	return sl.NextToken[0].NDecoded
}

// Latest returns the slot that ran the most recent task.
func Latest(slots []Slot) Slot {
	var last Slot
	for _, sl := range slots {
		if sl.IDTask >= last.IDTask {
			last = sl
		}
	}
	return last
}

// Slots reads GET /slots.
func (s *Server) Slots(ctx context.Context) ([]Slot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/slots", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /slots: status %d", resp.StatusCode)
	}
	var slots []Slot
	if err := json.NewDecoder(resp.Body).Decode(&slots); err != nil {
		return nil, fmt.Errorf("GET /slots: %w", err)
	}
	return slots, nil
}

// WaitIdle polls /slots until no slot is processing and returns how long
// that took, with the slots as last read; it gives up after limit.
func (s *Server) WaitIdle(ctx context.Context, limit time.Duration) (time.Duration, []Slot, error) {
	start := time.Now()
	for {
		slots, err := s.Slots(ctx)
		if err != nil {
			return time.Since(start), nil, err
		}
		busy := false
		for _, sl := range slots {
			busy = busy || sl.IsProcessing
		}
		if !busy {
			return time.Since(start), slots, nil
		}
		if time.Since(start) > limit {
			return time.Since(start), slots, fmt.Errorf("a slot still processing after %v", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
