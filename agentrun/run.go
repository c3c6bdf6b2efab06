package agentrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/loopguard/loopguard/intercept"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/proxy"
	"github.com/rs/zerolog"
)

// Options configures one guarded run.
type Options struct {
	// Config is the configuration of the loopguard that Run starts; its
	// listen address and upstreams are set by Run. Unused with ProxyURL.
	Config proxy.Config
	// Upstream, when set, is the upstream of every wire API (-upstream),
	// above what the environment's base-URL variables held.
	Upstream string
	// ProxyURL, when set, is a running loopguard to guard the run with
	// instead of starting one; its upstreams are its own.
	ProxyURL string
	// Session is the run's session id; empty picks a fresh one.
	Session string
	// Command is the command to run and its arguments.
	Command []string
	// Env is the environment the command inherits, as os.Environ.
	Env []string
	// The command's standard streams.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Notices receives run's own lines: the log path at start, hints.
	Notices io.Writer
	// LogDir is where the log (and the timeline of an in-process run) is
	// written. Empty: os.TempDir().
	LogDir string
	// Signals are forwarded to the command while it runs; nil forwards none.
	Signals <-chan os.Signal
	// Grace bounds the shutdown of the in-process loopguard. Default 5s.
	Grace time.Duration
	// Budget, when not zero, is the run's own session budget (-max-tokens,
	// -max-turns): it wins over the configured ones.
	Budget policy.Budget
	// Intercept sends the agent through a forward proxy of the run's
	// loopguard, which intercepts its connections to the model hosts
	// (intercept.Hosts). Unused with ProxyURL.
	Intercept bool
	// Resolve sends what is meant for its hosts elsewhere: intercepted
	// connections, and the upstreams chosen.
	Resolve intercept.Resolve
}

// Run runs the command under loopguard and returns the run's summary. The
// error is loopguard's own (it could not start), or a *StartError when the
// command could not be started; the command's failure is its exit code in
// the summary.
func Run(ctx context.Context, o Options) (Summary, error) {
	if len(o.Command) == 0 {
		return Summary{}, errors.New("no command to run")
	}
	id := o.Session
	if id == "" {
		id = NewSessionID(time.Now())
	} else if err := proxy.ValidateSessionID(id); err != nil {
		return Summary{}, fmt.Errorf("-session %q: %w", id, err)
	}
	if o.LogDir == "" {
		o.LogDir = os.TempDir()
	}
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	logPath := filepath.Join(o.LogDir, "loopguard-"+id+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return Summary{}, fmt.Errorf("log file: %w", err)
	}
	defer logFile.Close()
	log := zerolog.New(logFile).With().Timestamp().Str("session", id).Logger()

	g := guard{id: id, adminToken: o.Config.Admin.Token}
	if o.ProxyURL != "" {
		g.base = strings.TrimSuffix(strings.TrimRight(o.ProxyURL, "/"), "/v1")
	} else {
		if err := g.start(o, log); err != nil {
			return Summary{}, err
		}
		defer g.stop(o.Grace, log)
	}
	if o.Budget != (policy.Budget{}) {
		if err := g.setBudget(ctx, o.Budget); err != nil {
			return Summary{}, fmt.Errorf("session budget: %w", err)
		}
	}
	sessionURL := g.base + "/s/" + id
	fmt.Fprintf(o.Notices, "loopguard: session %s at %s; log: %s\n", id, sessionURL, logPath)
	// Intercepted, the upstreams serve only base URLs that were set or an
	// upstream that was named; without either they serve nothing.
	fromEnv := Upstreams(lookupEnv(o.Env))
	baseURLs := g.fp == nil || upstreamNamed(o) || len(fromEnv) > 0
	if len(g.upstreams) > 0 && baseURLs {
		fmt.Fprintf(o.Notices, "loopguard: upstream %s (%s: %s)", redact(g.upstreams[wireapi.OpenAI]),
			wireapi.OpenAI, g.choices[wireapi.OpenAI].Reason)
		for _, w := range upstreamWires[1:] {
			fmt.Fprintf(o.Notices, ", %s (%s)", redact(g.upstreams[w]), w)
		}
		fmt.Fprintln(o.Notices)
	}
	if g.fp != nil {
		fmt.Fprintf(o.Notices, "loopguard: intercepting the model hosts through %s (CA %s); -intercept=false turns it off\n",
			redactProxy(g.proxyURL), g.ca.extra)
	}
	if h := Hint(o.Command[0], sessionURL, g.fp != nil); h != "" {
		fmt.Fprintf(o.Notices, "loopguard: %s\n", h)
	}

	env := Environ(o.Env, sessionURL)
	if g.fp != nil && !upstreamNamed(o) {
		// Each agent goes where it goes by itself, intercepted; only a
		// base URL the user set is pointed at loopguard.
		env = EnvironSet(o.Env, sessionURL, g.intercepts)
	}
	if g.fp == nil || upstreamNamed(o) || fromEnv[wireapi.OpenAI] != "" {
		// Codex reads no base-URL variable: the one it would be sent
		// to is given on its command line.
		o.Command = Args(o.Command, sessionURL)
	}
	if g.fp != nil {
		env = interceptEnviron(env, g.proxyURL, g.ca, g.hosts)
	}
	code, err := runCommand(ctx, o, env)
	if err != nil {
		return Summary{}, err
	}
	log.Info().Int("exit_code", code).Msg("command ended")
	sum := Summary{Session: id, ExitCode: code, Loops: []Loop{}, Log: logPath}
	if c, ok := g.choices[wireapi.OpenAI]; ok && baseURLs {
		sum.Upstream, sum.UpstreamReason = redact(c.URL), c.Reason
	}
	d, seen, err := g.record(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("reading the session's record failed")
		fmt.Fprintf(o.Notices, "loopguard: cannot read the session's record: %v\n", err)
	}
	if seen {
		fill(&sum, &d)
	}
	switch {
	case o.ProxyURL != "":
		sum.Timeline = "curl -s " + g.base + "/loopguard/api/sessions/" + id
	case seen:
		// The in-process loopguard ends with the run: keep its record in
		// the admin API's shape.
		path := filepath.Join(o.LogDir, "loopguard-"+id+".timeline.json")
		b, _ := json.MarshalIndent(&d, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o600); err == nil {
			sum.Timeline = "cat " + path
		}
	}
	return sum, nil
}

// upstreamNamed reports an upstream the user named (-upstream, the
// configuration): every agent is sent there through its base URL, as
// without interception.
func upstreamNamed(o Options) bool {
	u := o.Config.Upstream
	return o.Upstream != "" || u.URL != "" || u.AnthropicURL != "" || len(u.URLs) > 0
}

// guard is the loopguard a run goes through.
type guard struct {
	id, base   string
	adminToken string
	srv        *proxy.Server
	served     chan error
	serving    int // Serve calls that send to served
	upstreams  map[Wire]string
	choices    map[Wire]Choice // upstreams, with why each was chosen
	// fp is the forward proxy of an intercepted run, at proxyURL; hosts
	// are the hosts it intercepts, ca the files of its CA, in caDir.
	fp       *intercept.Proxy
	proxyURL string
	hosts    []string
	ca       caFiles
	caDir    string
}

// start serves an in-process loopguard on a free loopback port.
func (g *guard) start(o Options, log zerolog.Logger) error {
	cfg := o.Config
	g.choices = ChooseUpstreams(o, cfg.Upstream)
	g.upstreams = map[Wire]string{}
	for w, c := range g.choices {
		c.URL = o.Resolve.Rewrite(c.URL)
		g.choices[w] = c
		g.upstreams[w] = c.URL
	}
	cfg.Upstream.URL = g.upstreams[wireapi.OpenAI]
	cfg.Upstream.AnthropicURL = ""
	cfg.Upstream.URLs = map[string]string{}
	for w, u := range g.upstreams {
		if u != cfg.Upstream.URL {
			cfg.Upstream.URLs[string(w)] = u
		}
	}
	cfg.Server.Listen = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n  %s", strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	var opts []proxy.Option
	if o.Intercept {
		icpt, err := g.startIntercept(o, cfg, log)
		if err != nil {
			return err
		}
		opts = append(opts, icpt)
	}
	srv, err := proxy.New(cfg, log, opts...)
	if err != nil {
		g.stopIntercept()
		return err
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		g.stopIntercept()
		return fmt.Errorf("listen: %w", err)
	}
	g.srv, g.served = srv, make(chan error, 2)
	g.serve(ln)
	if g.fp != nil {
		g.serve(g.fp.Intercepted())
	}
	g.base = "http://" + ln.Addr().String()
	ev := log.Info().Str("listen", ln.Addr().String()).Str("upstream", redact(cfg.Upstream.URL))
	for w, u := range cfg.Upstream.URLs {
		ev = ev.Str(string(w)+"_upstream", redact(u))
	}
	ev.Msg("loopguard serving for one run")
	return nil
}

// stop shuts the in-process loopguard down, letting answers in flight end.
func (g *guard) stop(grace time.Duration, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	// The agent has ended: its tunnels and handshakes go first.
	g.stopIntercept()
	if err := g.srv.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("shutdown did not finish within the grace period")
	}
	for ; g.serving > 0; g.serving-- {
		if err := <-g.served; err != nil {
			log.Error().Err(err).Msg("serve failed")
		}
	}
}

// serve serves ln with the in-process loopguard until stop.
func (g *guard) serve(ln net.Listener) {
	g.serving++
	go func() { g.served <- g.srv.Serve(ln) }()
}

func lookupEnv(env []string) func(string) string {
	return func(name string) string {
		for i := len(env) - 1; i >= 0; i-- { // the last entry wins, as in exec
			if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
				return v
			}
		}
		return ""
	}
}

// runCommand runs the command to its end and returns its exit code: its own,
// or 128 plus the signal that ended it, as shells report it.
func runCommand(ctx context.Context, o Options, env []string) (int, error) {
	cmd := exec.Command(o.Command[0], o.Command[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	cmd.SysProcAttr = childAttr()
	// Pdeathsig fires when the thread that started the child exits, not the
	// process: keep this goroutine on its thread until the child is gone,
	// so that the Go runtime never retires that thread under it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return 0, &StartError{Command: o.Command[0], Err: err}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
wait:
	for {
		select {
		case err = <-waited:
			break wait
		case sig := <-o.Signals:
			_ = cmd.Process.Signal(sig)
		case <-ctx.Done():
			// The caller gave up: end the command as SIGTERM would.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			ctx = context.Background() // signal once, then wait for it
		}
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	return 0, fmt.Errorf("wait %s: %w", o.Command[0], err)
}

// A StartError is a command that could not be started: not found, or found
// but not executable.
type StartError struct {
	Command string
	Err     error
}

func (e *StartError) Error() string { return "start " + e.Command + ": " + e.Err.Error() }

func (e *StartError) Unwrap() error { return e.Err }

// ExitCode is the exit status a shell reports for the command: 127 when it
// was not found, 126 when it was found but could not be executed (no
// permission, not an executable format, a directory). Wrappers such as env,
// nohup and timeout keep the convention, so that scripts can tell "not
// found" from "failed".
func (e *StartError) ExitCode() int {
	if errors.Is(e.Err, exec.ErrNotFound) || errors.Is(e.Err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// NewSessionID returns a fresh session id: the start time and random bits,
// readable in a list of sessions and unique across machines.
func NewSessionID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "run-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// redact drops a password from a URL for printing.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}
