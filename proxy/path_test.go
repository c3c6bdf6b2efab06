package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

func TestCleanPath(t *testing.T) {
	tests := []struct {
		give   string
		want   string
		wantOK bool
	}{
		{"/v1/chat/completions", "/v1/chat/completions", true},
		{"/v1/models/gpt-4.1", "/v1/models/gpt-4.1", true},
		{"/v1/files/.hidden", "/v1/files/.hidden", true},
		{"/v1/files/a%20b", "/v1/files/a%20b", true},
		{"/v1/files/%2ehidden", "/v1/files/%2ehidden", true},
		{"/v1//weird/../path", "/v1//path", true},
		{"/v1/./models", "/v1/models", true},
		{"/v1/models/..", "/v1/", true},
		{"/v1/models/.", "/v1/models/", true},
		{"/a/b/../../v1/models", "/v1/models", true},
		{"/..", "", false},
		{"/../tenant-b/v1/models", "", false},
		{"/v1/../../tenant-b/v1/models", "", false},
		{"/v1/..%2F..%2Ftenant-b/v1/models", "", false},
		{"/v1/%2e%2e/%2E%2E/tenant-b", "", false},
		{"/v1/.%2e/x", "", false},
		{"/v1/..\\..\\tenant-b", "", false},
		{"/v1/..%5c..%5ctenant-b", "", false},
		{"/v1/..;x/..;x/tenant-b", "", false},
		{"/v1/%2e/models", "", false},
	}
	for _, tt := range tests {
		got, ok := cleanPath(nil, []byte(tt.give))
		if ok != tt.wantOK || ok && string(got) != tt.want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestDotSegmentsStayUnderTheBase: however a path spells its dot-segments
// (plain, percent-encoded, after a session prefix), the upstream gets a
// path under its configured base, or the client gets an OpenAI-shaped 400
// and the upstream nothing, never the api_key on another tenant's path.
func TestDotSegmentsStayUnderTheBase(t *testing.T) {
	up, got := upstreamRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":[]}`)
	})
	_, base := startProxy(t, func(c *Config) {
		c.Upstream.URL = up.URL + "/tenant-a/v1"
		c.Upstream.APIKey = "sk-tenant-a"
	})
	tests := []struct {
		path     string
		wantPath string // "" : refused with 400
	}{
		{"/../tenant-b/v1/models", ""},
		{"/v1/../../tenant-b/v1/models", ""},
		{"/s/abc/../../tenant-b/v1/models", ""},
		{"/v1/..%2F..%2Ftenant-b/v1/models", ""},
		{"/v1/%2e%2e/%2e%2e/tenant-b/v1/models", ""},
		{"/s/abc/v1/%2e%2e/%2e%2e/tenant-b/v1/models", ""},
		{"/v1/files/../models", "/tenant-a/v1/models"},
		{"/v1/models", "/tenant-a/v1/models"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			status, body := rawGet(t, base, tt.path)
			if tt.wantPath == "" {
				if status != http.StatusBadRequest || gjson.Get(body, "error.code").String() != "invalid_path" ||
					gjson.Get(body, "error.type").String() != "invalid_request_error" || !gjson.Get(body, "error.message").Exists() {
					t.Errorf("GET %s = %d %s; want 400 with an invalid_path error", tt.path, status, body)
				}
				select {
				case r := <-got:
					t.Errorf("GET %s reached the upstream as %s", tt.path, r.uri)
				default:
				}
				return
			}
			if status != http.StatusOK {
				t.Fatalf("GET %s = %d %s; want 200", tt.path, status, body)
			}
			select {
			case r := <-got:
				if r.uri != tt.wantPath {
					t.Errorf("GET %s reached the upstream as %s; want %s", tt.path, r.uri, tt.wantPath)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("GET %s never reached the upstream", tt.path)
			}
		})
	}
}

// rawGet sends GET path exactly as written (no client cleans it) and
// returns the status and body.
func rawGet(t *testing.T, base, path string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
