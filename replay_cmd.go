package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/loopguard/loopguard/config"
	"github.com/loopguard/loopguard/replay"
)

// runReplay is `loopguard replay [-config FILE] FILE...`.
func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loopguard replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", "", "TOML configuration `file` (detector thresholds, ladder, templates, [judge])")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: loopguard replay [-config FILE] FILE... (JSONL, or JSON object/array; - for stdin)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cfg, err := config.LoadFile(*file)
	if err != nil {
		fmt.Fprintf(stderr, "loopguard replay: invalid configuration: %v\n", err)
		return 2
	}
	return replay.Main(cfg, fs.Args(), stdout, stderr)
}
