package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/loopguard/loopguard/agentrun"
	"github.com/loopguard/loopguard/config"
	"github.com/loopguard/loopguard/intercept"
	"github.com/loopguard/loopguard/policy"
)

// runAgent is `loopguard run [-config FILE] [-proxy URL] [-upstream URL]
// [-session ID] [-json FILE] [-max-tokens N] [-max-turns N] [-exit-on-stop]
// [-intercept=false] [-resolve HOST=URL]... -- COMMAND [ARGS]`. It exits with the command's exit code, or with
// -exit-on-stop agentrun.ExitLoopDetected or ExitBudgetExceeded when
// loopguard ended the run; 2 for a usage error, 1 when loopguard itself
// cannot start, and as a shell does 127 when the command is not found and
// 126 when it cannot be executed.
func runAgent(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loopguard run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", "", "TOML configuration `file` (env LOOPGUARD_CONFIG)")
	proxyURL := fs.String("proxy", "", "use the loopguard running at `URL` instead of starting one")
	upstream := fs.String("upstream", "", "upstream base `URL` for every wire API (default: what OPENAI_BASE_URL, ANTHROPIC_BASE_URL... held, else the config's, else the vendors' APIs)")
	session := fs.String("session", "", "session `id` of this run (default: run-<time>-<random>)")
	jsonFile := fs.String("json", "", "also write the summary as JSON to `file`")
	maxTokens := fs.Int64("max-tokens", 0, "end the run with BUDGET_EXCEEDED once the upstream reported this many `tokens` (0: the configured budget)")
	maxTurns := fs.Int("max-turns", 0, "end the run with BUDGET_EXCEEDED after this many model `calls` (0: the configured budget)")
	exitOnStop := fs.Bool("exit-on-stop", false, fmt.Sprintf("exit %d when loopguard ended the run with LOOP_DETECTED, %d with BUDGET_EXCEEDED, instead of the command's exit code ([run] exit_on_stop)",
		agentrun.ExitLoopDetected, agentrun.ExitBudgetExceeded))
	icpt := fs.Bool("intercept", true, "intercept the agent's connections to the model hosts (README: interception); false: base-URL variables only")
	resolve := intercept.Resolve{}
	fs.Var(resolve, "resolve", "send what is meant for `HOST=URL`'s host to URL instead, intercepted or chosen as upstream (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: loopguard run [-config FILE] [-proxy URL] [-upstream URL] [-session ID] [-json FILE] [-max-tokens N] [-max-turns N] [-exit-on-stop] [-intercept=false] [-resolve HOST=URL]... -- COMMAND [ARGS...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if *maxTokens < 0 || *maxTurns < 0 {
		fmt.Fprintln(stderr, "loopguard run: -max-tokens and -max-turns must not be negative")
		return 2
	}
	cfg, err := config.LoadFileEnv(*file, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "loopguard run: invalid configuration: %v\n", err)
		return 2
	}

	// Until the command ends, SIGINT and SIGTERM are the command's: they are
	// forwarded to it, and loopguard stays up to serve its last requests
	// and print the summary. A Ctrl-C typed on the terminal reaches the
	// command from the terminal itself (it shares loopguard's foreground
	// process group), so forwarding it as well would deliver it twice, and
	// agents read a second Ctrl-C as "exit now".
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	forward := make(chan os.Signal, 1)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGINT && foreground(stdin) {
				continue
			}
			select {
			case forward <- sig:
			default: // one is waiting to be delivered already
			}
		}
	}()
	defer func() {
		signal.Stop(sigs)
		close(sigs)
	}()

	sum, err := agentrun.Run(context.Background(), agentrun.Options{
		Config:    cfg,
		Upstream:  *upstream,
		ProxyURL:  *proxyURL,
		Session:   *session,
		Command:   fs.Args(),
		Env:       os.Environ(),
		Stdin:     stdin,
		Stdout:    stdout,
		Stderr:    stderr,
		Notices:   stderr,
		Signals:   forward,
		Budget:    policy.Budget{MaxTokens: *maxTokens, MaxTurns: *maxTurns},
		Intercept: *icpt,
		Resolve:   resolve,
	})
	if err != nil {
		fmt.Fprintf(stderr, "loopguard run: %v\n", err)
		if se := (*agentrun.StartError)(nil); errors.As(err, &se) {
			return se.ExitCode() // 127 or 126, as a shell says
		}
		return 1
	}
	sum.Print(stderr)
	if *jsonFile != "" {
		b, _ := json.MarshalIndent(&sum, "", "  ")
		if err := os.WriteFile(*jsonFile, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "loopguard run: -json: %v\n", err)
		}
	}
	return sum.StopExitCode(*exitOnStop || cfg.Run.ExitOnStop)
}
