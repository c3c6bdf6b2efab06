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
	"syscall"
	"time"

	"github.com/loopguard/loopguard/demo"
	"github.com/loopguard/loopguard/fakellm"
)

// demoTimeout bounds the scripted run; it takes well under a second, so
// hitting this means something is stuck.
const demoTimeout = 60 * time.Second

// runDemo is `loopguard demo [-serve] [-listen ADDR] [-model ADDR] [-no-color] [-v]`.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loopguard demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serveFlag := fs.Bool("serve", false, "keep the proxy up in front of the scripted model for any client")
	listen := fs.String("listen", "127.0.0.1:8787", "with -serve: the proxy's address")
	model := fs.String("model", "", "serve only the scripted model on `ADDR`: an OpenAI-compatible upstream for loopguards run apart (deploy/)")
	noColor := fs.Bool("no-color", false, "plain text even on a terminal")
	verbose := fs.Bool("v", false, "print the proxy's logs to stderr")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: loopguard demo [-serve [-listen ADDR] | -model ADDR] [-no-color] [-v]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loopguard demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	opts := demo.Options{Color: !*noColor && colorTerminal(stdout)}
	if *verbose {
		opts.Log = stderr
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *model != "" {
		ln, err := net.Listen("tcp", *model)
		if err != nil {
			fmt.Fprintf(stderr, "loopguard demo: listen: %v\n", err)
			return 1
		}
		return serveModel(ctx, ln, stdout)
	}
	if *serveFlag {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintf(stderr, "loopguard demo: listen: %v\n", err)
			return 1
		}
		if err := demo.Serve(ctx, ln, stdout, opts); err != nil {
			fmt.Fprintf(stderr, "loopguard demo: %v\n", err)
			return 1
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	if err := demo.Run(ctx, stdout, opts); err != nil {
		fmt.Fprintf(stderr, "loopguard demo: %v\n", err)
		return 1
	}
	return 0
}

// serveModel serves the demo's scripted model on ln until ctx ends. Any
// model name gets a plain answer; the demo's names (demo-stubborn, ...)
// play their scenarios.
func serveModel(ctx context.Context, ln net.Listener, stdout io.Writer) int {
	m := fakellm.New(demo.Script())
	m.SetRecording(false) // it may run for days; nobody reads the exchanges
	done := make(chan error, 1)
	go func() { done <- m.Serve(ln) }()
	fmt.Fprintf(stdout, "scripted model (OpenAI-compatible) at http://%s/v1\n", ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-done:
		fmt.Fprintf(stdout, "loopguard demo: %v\n", err)
		return 1
	}
	_ = m.Close()
	<-done
	return 0
}

// colorTerminal reports whether w is a terminal that wants colour: a
// character device, with NO_COLOR (no-color.org) unset and TERM not dumb.
func colorTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
