package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// publicListener accepts loopback connections but reports a public local
// address for them, as a listener on a routable interface would.
type publicListener struct{ net.Listener }

func (l publicListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return publicConn{c}, nil
}

type publicConn struct{ net.Conn }

func (publicConn) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8787} }

// TestMetricsAccess: /metrics follows the admin API's rule (README): without
// [admin] token only loopback listeners answer; with one, the bearer token
// is required on every listener.
func TestMetricsAccess(t *testing.T) {
	tests := []struct {
		name   string
		token  string
		public bool // request through a listener on a public address
		auth   string
		want   int
	}{
		{"no token, loopback", "", false, "", 200},
		{"no token, public listener", "", true, "", 403},
		{"token, none sent", "s3cret", false, "", 401},
		{"token, wrong", "s3cret", false, "Bearer nope", 401},
		{"token, right, loopback", "s3cret", false, "Bearer s3cret", 200},
		{"token, right, public listener", "s3cret", true, "Bearer s3cret", 200},
	}
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, base := startProxy(t, func(c *Config) {
				c.Upstream.URL = up.URL
				c.Admin.Token = tt.token
			})
			if tt.public {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				// startProxy's cleanup shuts the server down, which closes
				// this listener too and ends this Serve.
				go func() { _ = srv.Serve(publicListener{ln}) }()
				base = "http://" + ln.Addr().String()
			}
			req, _ := http.NewRequest("GET", base+"/metrics", nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := newClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("GET /metrics = %d; want %d", resp.StatusCode, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); tt.want == 200 && !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("Content-Type = %q; want the Prometheus text format", ct)
			}
		})
	}
}

// TestPprofAccess: Go's profiles are not served unless [admin] pprof is on,
// and then under the admin API's rule: loopback listeners only without a
// token, the bearer token with one.
func TestPprofAccess(t *testing.T) {
	tests := []struct {
		name   string
		pprof  bool
		token  string
		public bool
		auth   string
		want   int
	}{
		{"off", false, "", false, "", 404},
		{"off, token sent", false, "s3cret", false, "Bearer s3cret", 404},
		{"on, loopback", true, "", false, "", 200},
		{"on, public listener", true, "", true, "", 403},
		{"on, token, none sent", true, "s3cret", false, "", 401},
		{"on, token, right, public listener", true, "s3cret", true, "Bearer s3cret", 200},
	}
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, base := startProxy(t, func(c *Config) {
				c.Upstream.URL = up.URL
				c.Admin.Token = tt.token
				c.Admin.Pprof = tt.pprof
			})
			if tt.public {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go func() { _ = srv.Serve(publicListener{ln}) }()
				base = "http://" + ln.Addr().String()
			}
			for _, path := range []string{"/loopguard/debug/pprof/", "/loopguard/debug/pprof/heap?debug=1", "/loopguard/debug/pprof/cmdline"} {
				req, _ := http.NewRequest("GET", base+path, nil)
				if tt.auth != "" {
					req.Header.Set("Authorization", tt.auth)
				}
				resp, err := newClient().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Fatalf("GET %s = %d; want %d", path, resp.StatusCode, tt.want)
				}
				if tt.want == 200 && path == "/loopguard/debug/pprof/heap?debug=1" && !strings.Contains(string(body), "heap profile") {
					t.Errorf("GET %s is not the heap profile: %.200q", path, body)
				}
			}
		})
	}
}
