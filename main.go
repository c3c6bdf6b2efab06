// Command loopguard is a transparent OpenAI-compatible reverse proxy that
// detects and breaks LLM agent loops. See README.md and DESIGN.md.
//
//	loopguard [-config FILE] [-listen ADDR] [-upstream URL]   serve
//	loopguard demo [-serve]                                    scripted demo, no LLM needed
//	loopguard replay [-config FILE] FILE...                    offline evaluation
//	loopguard run [-proxy URL] [-session ID] [-json FILE] -- COMMAND [ARGS]   guard one agent run
//	loopguard version
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
	"strings"
	"syscall"
	"time"

	"github.com/loopguard/loopguard/config"
	"github.com/loopguard/loopguard/proxy"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without os.Exit, so the subcommands can be tested.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version":
			fmt.Fprintln(stdout, "loopguard", version)
			return 0
		case "replay":
			return runReplay(args[1:], stdout, stderr)
		case "demo":
			return runDemo(args[1:], stdout, stderr)
		case "run":
			return runAgent(args[1:], os.Stdin, stdout, stderr)
		case "serve":
			args = args[1:]
		}
	}
	return serve(args, stderr)
}

func serve(args []string, stderr io.Writer) int {
	cfg, err := config.Load("loopguard", args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
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
