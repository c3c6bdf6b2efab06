// Command loopguard is a transparent OpenAI-compatible reverse proxy that
// detects and breaks LLM agent loops. See README.md and docs/design.md;
// `loopguard -h` lists the subcommands, `loopguard COMMAND -h` their flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/loopguard/loopguard/config"
	"github.com/loopguard/loopguard/proxy"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// version is set at build time with -ldflags "-X main.version=..."; when it
// is not, the module version Go stamped into the binary is printed.
var version = ""

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// A command is one of loopguard's subcommands, as `loopguard -h` lists it.
type command struct {
	name    string
	summary string // one line for the list
	// run runs the command with the arguments after its name; nil for
	// help, which run handles itself.
	run func(args []string, stdout, stderr io.Writer) int
}

// commands are the subcommands, in the order -h lists them; run dispatches
// from this list alone, so a command is never missing from the help. It is
// filled in init: serve and help print the list.
var commands []command

func init() {
	commands = []command{
		{"serve", "serve the proxy in front of a model server; the command when none is named",
			func(args []string, _, stderr io.Writer) int { return serve(args, stderr, true) }},
		{"run", "run one agent behind its own loopguard, then print the loops it met",
			func(args []string, stdout, stderr io.Writer) int { return runAgent(args, os.Stdin, stdout, stderr) }},
		{"demo", "a scripted model and a looping agent through the real proxy; no LLM needed", runDemo},
		{"replay", "evaluate the detectors offline on recorded sessions (JSONL)", runReplay},
		{"version", "print loopguard's version and the Go version it was built with", runVersion},
		{"help", "show this list, or a command's flags: loopguard help COMMAND", nil},
	}
}

// usage is the overview -h prints: the commands and the most used
// invocations.
func usage(w io.Writer) {
	fmt.Fprint(w, `loopguard: a transparent OpenAI-compatible proxy that detects LLM agent loops and breaks them.

usage: loopguard [COMMAND] [FLAGS] [ARGS]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Most used:
  loopguard run -- codex exec "fix the build"       guard one agent run (claude, aider, any OpenAI or Anthropic client)
  loopguard -upstream http://127.0.0.1:8000/v1      serve in front of a model server on 127.0.0.1:8787
  loopguard demo                                    watch it catch a looping agent, no model needed

Run 'loopguard COMMAND -h' for a command's flags ('loopguard serve -h' for the proxy's).
`)
}

// run is main without os.Exit, so the subcommands can be tested.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return serve(args, stderr, false)
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		return runVersion(args[1:], stdout, stderr)
	case "help":
		if len(args) > 1 && args[1] != "help" {
			if c := lookupCommand(args[1]); c != nil {
				return c.run([]string{"-h"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "loopguard help: unknown command %q\n\n", args[1])
			usage(stderr)
			return 2
		}
		usage(stdout)
		return 0
	}
	if c := lookupCommand(args[0]); c != nil {
		return c.run(args[1:], stdout, stderr)
	}
	if !strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "loopguard: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return serve(args, stderr, false) // flags of the default command
}

// lookupCommand returns the command called name, nil if there is none (or
// it is help).
func lookupCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name && commands[i].run != nil {
			return &commands[i]
		}
	}
	return nil
}

// runVersion is `loopguard version`: the module version (or the one set at
// build time) and the Go version.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loopguard version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: loopguard version\n\nPrints loopguard's module version and the Go version it was built with.")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fmt.Fprintf(stdout, "loopguard %s %s %s/%s\n", moduleVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

// moduleVersion is the version to print: the one set at build time, else
// the main module's version in the build info ("(devel)" for a build from a
// checkout, v1.2.3 for `go install ...@v1.2.3`), with the VCS revision when
// Go stamped one.
func moduleVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" && v == "(devel)" {
		v += " " + rev[:min(12, len(rev))] + dirty
	}
	return v
}

// serve is `loopguard [serve] [FLAGS]`; named reports whether the command
// line named it, else a bad flag also shows the list of commands (the user
// may have meant another).
func serve(args []string, stderr io.Writer, named bool) int {
	cfg, err := config.Load("loopguard serve", args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, config.ErrFlags) {
		if !named {
			fmt.Fprintln(stderr)
			usage(stderr)
		}
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "loopguard: invalid configuration:\n  %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return 2
	}
	log := newLogger(cfg.Log, stderr)
	// go-redis writes its connection errors with the standard logger;
	// route them into loopguard's log lines.
	redis.SetLogger(redisLogger{log})
	srv, err := proxy.New(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "loopguard: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "loopguard: listen: %v\n", err)
		return 1
	}
	log.Info().Str("listen", ln.Addr().String()).Str("upstream", redact(cfg.Upstream.URL)).
		Str("mode", string(cfg.Policy.Mode)).Msg("loopguard serving")
	return serveUntilSignal(srv, ln, cfg.Server.ShutdownGrace, log)
}

// serveUntilSignal serves until SIGINT or SIGTERM, then shuts down letting
// running streams finish within grace; those still open then are closed.
func serveUntilSignal(srv *proxy.Server, ln net.Listener, grace time.Duration, log zerolog.Logger) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if err != nil {
			log.Error().Err(err).Msg("serve failed")
			return 1
		}
		return 0
	case sig := <-sigs:
		log.Info().Str("signal", sig.String()).Dur("grace", grace).Msg("shutting down")
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		// The proxy waits for its streams without end; the grace is the
		// bound an orchestrator relies on (it kills the process soon after).
		n := srv.CloseConnections()
		log.Warn().Err(err).Int("connections", n).Msg("shutdown grace over: closing the connections still open")
	}
	<-errc
	return 0
}

func newLogger(cfg proxy.LogConfig, w io.Writer) zerolog.Logger {
	if strings.EqualFold(cfg.Format, "console") {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	level, err := zerolog.ParseLevel(strings.ToLower(cfg.Level))
	if err != nil {
		level = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// redisLogger adapts zerolog to go-redis's logger.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn().Str("component", "redis").Msgf(format, v...)
}

// redact drops userinfo from a URL for logging.
func redact(raw string) string {
	if i := strings.Index(raw, "@"); i >= 0 {
		if j := strings.Index(raw, "://"); j >= 0 && j < i {
			return raw[:j+3] + "***" + raw[i:]
		}
	}
	return raw
}
