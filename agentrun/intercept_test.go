package agentrun

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInterceptEnviron: the agent is sent through the forward proxy in
// both spellings, trusts the run's CA, and keeps loopback and the user's
// own NO_PROXY entries, less those that would exempt a model host.
func TestInterceptEnviron(t *testing.T) {
	const proxyURL = "http://loopguard:tok@127.0.0.1:5000"
	hosts := []string{"chatgpt.com", "api.anthropic.com"}
	files := caFiles{extra: "/tmp/x/ca.pem", stores: map[string]string{"SSL_CERT_FILE": "/tmp/x/ssl.pem", "CURL_CA_BUNDLE": "/tmp/x/curl.pem"}}
	env := []string{"PATH=/bin", "HTTPS_PROXY=http://corp:3128", "no_proxy=.corp.example,*,anthropic.com,chatgpt.com:443,localhost",
		"SSL_CERT_FILE=/etc/mine.pem", "OPENAI_API_KEY=sk-1"}
	got := interceptEnviron(env, proxyURL, files, hosts)
	want := []string{"PATH=/bin", "OPENAI_API_KEY=sk-1",
		"HTTPS_PROXY=" + proxyURL, "https_proxy=" + proxyURL, "HTTP_PROXY=" + proxyURL, "http_proxy=" + proxyURL,
		"NO_PROXY=localhost,127.0.0.1,::1,.corp.example", "no_proxy=localhost,127.0.0.1,::1,.corp.example",
		"NODE_EXTRA_CA_CERTS=/tmp/x/ca.pem", "CODEX_CA_CERTIFICATE=/tmp/x/ssl.pem", "SSL_CERT_FILE=/tmp/x/ssl.pem", "CURL_CA_BUNDLE=/tmp/x/curl.pem"}
	if !slices.Equal(got, want) {
		t.Errorf("interceptEnviron =\n%q\nwant\n%q", got, want)
	}
	// Without system roots, nothing replaces a trust store.
	got = interceptEnviron(nil, proxyURL, caFiles{extra: "/tmp/x/ca.pem"}, hosts)
	if slices.ContainsFunc(got, func(kv string) bool { return strings.HasPrefix(kv, "SSL_CERT_FILE=") }) ||
		!slices.Contains(got, "CODEX_CA_CERTIFICATE=/tmp/x/ca.pem") {
		t.Errorf("interceptEnviron without roots = %q; want no SSL_CERT_FILE and Codex on the CA alone", got)
	}
}

// TestWriteCAFiles: the CA alone for NODE_EXTRA_CA_CERTS (after the
// user's own extra CAs), and for each variable that replaces a trust store
// its own roots (the user's file for it, else SSL_CERT_FILE's) plus the CA.
func TestWriteCAFiles(t *testing.T) {
	dir := t.TempDir()
	const cert = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
	userRoots := filepath.Join(dir, "roots.pem")
	userExtra := filepath.Join(dir, "extra.pem")
	os.WriteFile(userRoots, []byte("-----BEGIN CERTIFICATE-----\nROOT\n-----END CERTIFICATE-----\n"), 0o600)
	os.WriteFile(userExtra, []byte("-----BEGIN CERTIFICATE-----\nCORP\n-----END CERTIFICATE-----"), 0o600)
	userCurl := filepath.Join(dir, "curl.pem")
	os.WriteFile(userCurl, []byte("-----BEGIN CERTIFICATE-----\nCURL\n-----END CERTIFICATE-----\n"), 0o600)
	env := map[string]string{"SSL_CERT_FILE": userRoots, "NODE_EXTRA_CA_CERTS": userExtra, "CURL_CA_BUNDLE": userCurl}
	out := t.TempDir()
	f, err := writeCAFiles(out, []byte(cert), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	extra, _ := os.ReadFile(f.extra)
	bundle, _ := os.ReadFile(f.stores["SSL_CERT_FILE"])
	requests, _ := os.ReadFile(f.stores["REQUESTS_CA_BUNDLE"])
	curl, _ := os.ReadFile(f.stores["CURL_CA_BUNDLE"])
	if string(extra) != "-----BEGIN CERTIFICATE-----\nCORP\n-----END CERTIFICATE-----\n"+cert {
		t.Errorf("extra file %q; want the user's extra CAs, then the run's", extra)
	}
	if string(bundle) != "-----BEGIN CERTIFICATE-----\nROOT\n-----END CERTIFICATE-----\n"+cert || string(requests) != string(bundle) {
		t.Errorf("SSL_CERT_FILE's bundle %q, REQUESTS_CA_BUNDLE's %q; want the user's roots, then the run's CA", bundle, requests)
	}
	if string(curl) != "-----BEGIN CERTIFICATE-----\nCURL\n-----END CERTIFICATE-----\n"+cert {
		t.Errorf("CURL_CA_BUNDLE's bundle %q; want the user's curl roots, then the run's CA", curl)
	}
}

// TestEnvironSet: intercepted, a base-URL variable is pointed at loopguard
// when the user set it, or when its wire's vendor host is not intercepted
// (Gemini's); the others stay unset, so each agent goes where it goes.
func TestEnvironSet(t *testing.T) {
	intercepted := func(h string) bool { return h == "api.openai.com" || h == "api.anthropic.com" }
	got := EnvironSet([]string{"PATH=/bin", "ANTHROPIC_BASE_URL=http://gw:8080", "OPENAI_API_BASE="}, base, intercepted)
	has := func(name string) (string, bool) {
		for _, kv := range got {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				return v, true
			}
		}
		return "", false
	}
	for name, want := range map[string]string{"ANTHROPIC_BASE_URL": base, "GOOGLE_GEMINI_BASE_URL": base, "CODE_ASSIST_ENDPOINT": base, "OPENAI_API_BASE": ""} {
		if v, _ := has(name); v != want {
			t.Errorf("EnvironSet: %s=%q; want %q (%q)", name, v, want, got)
		}
	}
	for _, name := range []string{"OPENAI_BASE_URL", "OLLAMA_HOST", "LLM_BASE_URL"} {
		if _, ok := has(name); ok {
			t.Errorf("EnvironSet sets %s; want it left unset (%q)", name, got)
		}
	}
}
