package agentrun

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/loopguard/loopguard/intercept"
	"github.com/loopguard/loopguard/proxy"
	"github.com/rs/zerolog"
)

// The variables that send the agent through the run's forward proxy, in
// both spellings: curl and Go read the lower-case ones, Node agents
// either.
var proxyVariables = []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"}

// noProxyVariables keep loopback off the proxy: the agent reaches the
// run's loopguard (base-URL route) and local servers directly.
var noProxyVariables = []string{"NO_PROXY", "no_proxy"}

// loopback is what NO_PROXY always holds in an intercepted run.
const loopback = "localhost,127.0.0.1,::1"

// systemRoots are the files where systems keep their trusted roots as one
// PEM bundle: those crypto/x509 reads on Linux (root_linux.go), then the
// BSDs' and macOS's. SSL_CERT_FILE, which replaces a tool's trust store,
// gets their roots and the run's CA.
var systemRoots = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// trustStores are the variables whose file replaces a tool's trust store:
// OpenSSL's (and Go's, Bun's, Codex's), curl's and Python requests'. Each
// gets roots of its own (the file the user's variable named, else
// SSL_CERT_FILE's, else the system's) and the run's CA, so that the tools
// reading it still verify every other host, and accept the intercepted ones.
var trustStores = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE"}

// caFiles are the run's CA as the agent reads it: the CA alone (after the
// user's own extra CAs) for NODE_EXTRA_CA_CERTS, which adds to Node's
// roots, and a bundle for each of trustStores, by variable; none when no
// roots were found (Windows keeps them elsewhere).
type caFiles struct {
	extra  string
	stores map[string]string
}

// writeCAFiles writes the files of caFiles into dir.
func writeCAFiles(dir string, caPEM []byte, getenv func(string) string) (caFiles, error) {
	f := caFiles{extra: filepath.Join(dir, "ca.pem"), stores: map[string]string{}}
	extra := caPEM
	if prev := getenv("NODE_EXTRA_CA_CERTS"); prev != "" {
		if b, err := os.ReadFile(prev); err == nil {
			extra = append(append(bytes.TrimRight(b, "\n"), '\n'), caPEM...)
		}
	}
	if err := os.WriteFile(f.extra, extra, 0o600); err != nil {
		return f, err
	}
	for _, v := range trustStores {
		roots := readRoots(getenv(v), getenv("SSL_CERT_FILE"))
		if roots == nil {
			continue
		}
		name := filepath.Join(dir, strings.ToLower(v)+".pem")
		if err := os.WriteFile(name, append(append(bytes.TrimRight(roots, "\n"), '\n'), caPEM...), 0o600); err != nil {
			return f, err
		}
		f.stores[v] = name
	}
	return f, nil
}

// readRoots reads the trusted roots: the first of files that holds
// certificates, else the system's bundle; nil when there is none.
func readRoots(files ...string) []byte {
	for _, name := range append(files, systemRoots...) {
		if name == "" {
			continue
		}
		if b, err := os.ReadFile(name); err == nil && bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
			return b
		}
	}
	return nil
}

// interceptEnviron returns env with the agent sent through the forward
// proxy at proxyURL and trusting the run's CA (files). NO_PROXY keeps
// loopback and what the user had, less what would exempt an intercepted
// host (hosts).
func interceptEnviron(env []string, proxyURL string, files caFiles, hosts []string) []string {
	getenv := lookupEnv(env)
	user := getenv("NO_PROXY")
	if user == "" {
		user = getenv("no_proxy")
	}
	noProxy := keepNoProxy(user, hosts)
	set := map[string]string{"NODE_EXTRA_CA_CERTS": files.extra, "CODEX_CA_CERTIFICATE": files.extra}
	for v, name := range files.stores {
		set[v] = name
	}
	if name, ok := files.stores["SSL_CERT_FILE"]; ok {
		set["CODEX_CA_CERTIFICATE"] = name
	}
	for _, name := range proxyVariables {
		set[name] = proxyURL
	}
	for _, name := range noProxyVariables {
		set[name] = noProxy
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := set[name]; !ok {
			out = append(out, kv)
		}
	}
	for _, group := range [][]string{proxyVariables, noProxyVariables, {"NODE_EXTRA_CA_CERTS", "CODEX_CA_CERTIFICATE"}, trustStores} {
		for _, name := range group {
			if v, ok := set[name]; ok {
				out = append(out, name+"="+v)
			}
		}
	}
	return out
}

// keepNoProxy is the NO_PROXY of an intercepted run: loopback, then the
// user's entries but those that would exempt an intercepted host ("*",
// the host, a domain above it).
func keepNoProxy(user string, hosts []string) string {
	out := loopback
	for _, e := range strings.Split(user, ",") {
		e = strings.TrimSpace(e)
		if e == "" || exempts(e, hosts) || strings.Contains(","+out+",", ","+e+",") {
			continue
		}
		out += "," + e
	}
	return out
}

// exempts reports whether the NO_PROXY entry e matches one of hosts.
func exempts(e string, hosts []string) bool {
	if e == "*" {
		return true
	}
	d := strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(e, "*"), "."))
	if h, _, ok := strings.Cut(d, ":"); ok && !strings.Contains(h, "]") && strings.Count(d, ":") == 1 {
		d = h // host:port
	}
	for _, h := range hosts {
		if h == d || strings.HasSuffix(h, "."+d) {
			return true
		}
	}
	return false
}

// redactProxy is the proxy's URL without its credential, for printing.
func redactProxy(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	u.User = nil
	return u.String()
}

// startIntercept makes the run's CA and its files, and starts the forward
// proxy on a free loopback port; the option serves its intercepted
// connections in the run's loopguard.
func (g *guard) startIntercept(o Options, cfg proxy.Config, log zerolog.Logger) (proxy.Option, error) {
	getenv := lookupEnv(o.Env)
	g.hosts = intercept.Hosts(cfg.Run.Hosts, o.Resolve)
	ca, err := intercept.NewCA(g.hosts)
	if err != nil {
		return nil, err
	}
	if g.caDir, err = os.MkdirTemp("", "loopguard-"+g.id+"-ca-"); err != nil {
		return nil, fmt.Errorf("CA files: %w", err)
	}
	if g.ca, err = writeCAFiles(g.caDir, ca.PEM(), getenv); err != nil {
		g.stopIntercept()
		return nil, fmt.Errorf("CA files: %w", err)
	}
	// The user's own proxy variables, as they were: loopguard's
	// connections go where the agent's would have gone.
	dialer := intercept.NewDialer(getenv, cfg.Upstream.ConnectTimeout)
	fp, err := intercept.New(intercept.Options{CA: ca, Hosts: g.hosts, Dialer: dialer, Log: log})
	if err != nil {
		g.stopIntercept()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		g.stopIntercept()
		return nil, fmt.Errorf("listen: %w", err)
	}
	g.fp, g.proxyURL = fp, fp.URL(ln.Addr())
	go func() {
		if err := fp.Serve(ln); err != nil {
			log.Error().Err(err).Msg("forward proxy failed")
		}
	}()
	log.Info().Str("listen", ln.Addr().String()).Strs("hosts", g.hosts).Msg("forward proxy intercepting the model hosts")
	return proxy.WithInterception(proxy.Interception{Session: g.id, BaseURL: o.Resolve.BaseURL, Dial: dialer.DialContext}), nil
}

// stopIntercept ends the forward proxy and removes the CA's files.
func (g *guard) stopIntercept() {
	if g.fp != nil {
		_ = g.fp.Close()
	}
	if g.caDir != "" {
		_ = os.RemoveAll(g.caDir)
	}
}

// intercepts reports whether the run intercepts host.
func (g *guard) intercepts(host string) bool {
	return slices.Contains(g.hosts, strings.ToLower(host))
}
