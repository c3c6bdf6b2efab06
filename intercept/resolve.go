package intercept

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
)

// Resolve sends what is meant for a host elsewhere (-resolve HOST=URL):
// keyed by host name in lower case, the base URL that replaces
// https://HOST. It serves tests (a fake model), staging and local models.
// A nil Resolve sends everything where it was meant to go.
type Resolve map[string]*url.URL

// Set adds one HOST=URL; Resolve is a flag.Value for a repeatable flag.
func (r Resolve) Set(v string) error {
	host, raw, ok := strings.Cut(v, "=")
	if _, _, err := net.SplitHostPort(host); err == nil {
		return fmt.Errorf("%q: HOST is a name without a port", v)
	}
	host = hostName(host)
	if !ok || host == "" || strings.Contains(host, "/") {
		return fmt.Errorf("%q: want HOST=URL (api.anthropic.com=http://127.0.0.1:8080)", v)
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want HOST=URL with an http:// or https:// URL and no query", v)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	r[host] = u
	return nil
}

// String lists the HOST=URL pairs, sorted.
func (r Resolve) String() string {
	pairs := make([]string, 0, len(r))
	for h, u := range r {
		pairs = append(pairs, h+"="+u.Redacted())
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// Rewrite returns raw, a URL, sent where r sends its host: the resolved
// URL's scheme and host, its path before raw's. A URL whose host r does
// not name, or that does not parse, is returned as it is.
func (r Resolve) Rewrite(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	to, ok := r[strings.ToLower(u.Hostname())]
	if !ok {
		return raw
	}
	out := *to
	out.Path = to.Path + u.Path
	out.RawQuery = u.RawQuery
	if u.User != nil {
		out.User = u.User
	}
	return out.String()
}

// BaseURL is the base URL of an intercepted connection's requests: hostport
// (from its CONNECT) as https, the port dropped when it is 443, or the URL
// r sends the host to.
func (r Resolve) BaseURL(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, "443"
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if to, ok := r[host]; ok {
		return to.String()
	}
	if port == "443" {
		return "https://" + bracket(host)
	}
	return "https://" + net.JoinHostPort(host, port)
}

func bracket(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}
