// Package config loads loopguard's configuration: defaults, then a TOML file,
// then LOOPGUARD_* environment variables, then command-line flags, each
// overriding the one before. It only reads; what each key means is documented
// on the structs of the package that owns it and in config.example.toml.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/loopguard/loopguard/proxy"
)

// EnvPrefix starts every environment variable loopguard reads.
const EnvPrefix = "LOOPGUARD_"

// Load builds the configuration for `loopguard serve` from args (without the
// program name) and the environment. The returned error names the bad key;
// flag.ErrHelp is returned for -h.
func Load(name string, args []string, getenv func(string) string, stderr io.Writer) (proxy.Config, error) {
	cfg := proxy.DefaultConfig()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", "", "TOML configuration `file` (env LOOPGUARD_CONFIG)")
	listen := fs.String("listen", "", "listen `address` (default 127.0.0.1:8787)")
	upstream := fs.String("upstream", "", "upstream base `URL`, with or without /v1 (env LOOPGUARD_UPSTREAM)")
	logFormat := fs.String("log-format", "", "log format: json or console")
	logLevel := fs.String("log-level", "", "log level: debug, info, warn, error")
	mode := fs.String("mode", "", "policy mode: enforce, shadow or off")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *file == "" {
		*file = getenv(EnvPrefix + "CONFIG")
	}
	if *file != "" {
		if err := decodeFile(*file, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := applyEnv(&cfg, getenv); err != nil {
		return cfg, err
	}
	for _, f := range []struct {
		val string
		dst *string
	}{
		{*listen, &cfg.Server.Listen},
		{*upstream, &cfg.Upstream.URL},
		{*logFormat, &cfg.Log.Format},
		{*logLevel, &cfg.Log.Level},
	} {
		if f.val != "" {
			*f.dst = f.val
		}
	}
	if *mode != "" {
		if err := setValue(reflect.ValueOf(&cfg.Policy.Mode).Elem(), *mode); err != nil {
			return cfg, fmt.Errorf("-mode: %w", err)
		}
	}
	return cfg, cfg.Validate()
}

// LoadFileEnv reads the TOML file (path, else LOOPGUARD_CONFIG) over the
// defaults, then the LOOPGUARD_* variables, without flags or validation: for
// `loopguard run`, which sets the listen address and the upstreams itself.
func LoadFileEnv(path string, getenv func(string) string) (proxy.Config, error) {
	if path == "" {
		path = getenv(EnvPrefix + "CONFIG")
	}
	cfg, err := LoadFile(path)
	if err != nil {
		return cfg, err
	}
	return cfg, applyEnv(&cfg, getenv)
}

// LoadFile reads a TOML file over the defaults without env or flags, for
// subcommands such as replay whose upstream is not a real server.
func LoadFile(path string) (proxy.Config, error) {
	cfg := proxy.DefaultConfig()
	if path == "" {
		return cfg, nil
	}
	return cfg, decodeFile(path, &cfg)
}

func decodeFile(path string, cfg *proxy.Config) error {
	md, err := toml.DecodeFile(path, cfg)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return fmt.Errorf("%s: %s", path, perr.ErrorWithPosition())
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		return fmt.Errorf("%s: unknown key(s): %s", path, strings.Join(keys, ", "))
	}
	return nil
}

// applyEnv sets every scalar key from LOOPGUARD_<SECTION>_<KEY>, for example
// LOOPGUARD_UPSTREAM_URL or LOOPGUARD_POLICY_MODE. LOOPGUARD_UPSTREAM is
// accepted as the short form of LOOPGUARD_UPSTREAM_URL.
func applyEnv(cfg *proxy.Config, getenv func(string) string) error {
	if v := getenv(EnvPrefix + "UPSTREAM"); v != "" {
		cfg.Upstream.URL = v
	}
	var errs []error
	walk(reflect.ValueOf(cfg).Elem(), nil, func(path []string, v reflect.Value) {
		name := EnvPrefix + strings.ToUpper(strings.Join(path, "_"))
		raw, ok := lookup(getenv, name)
		if !ok {
			return
		}
		if err := setValue(v, raw); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", strings.Join(path, "."), name, err))
		}
	})
	return errors.Join(errs...)
}

func lookup(getenv func(string) string, name string) (string, bool) {
	if getenv == nil {
		return "", false
	}
	v := getenv(name)
	return v, v != ""
}

// walk visits every settable scalar or slice field reachable through nested
// structs, naming it by its TOML path. Maps (per-model, per-tool overrides)
// are file-only.
func walk(v reflect.Value, path []string, visit func([]string, reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if tag == "-" || tag == "" {
			continue
		}
		p := append(append([]string(nil), path...), tag)
		fv := v.Field(i)
		switch {
		case fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)):
			walk(fv, p, visit)
		case fv.Kind() == reflect.Map, fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() == reflect.Struct:
			// Tables keyed by model or tool, and arrays of tables: file only.
		default:
			visit(p, fv)
		}
	}
}

var durationType = reflect.TypeOf(time.Duration(0))

// setValue parses raw into v according to v's type.
func setValue(v reflect.Value, raw string) error {
	if v.Type() == durationType {
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return err
		}
		v.SetInt(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return err
		}
		v.SetFloat(f)
	case reflect.Slice:
		parts := strings.Split(raw, ",")
		s := reflect.MakeSlice(v.Type(), 0, len(parts))
		for _, p := range parts {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := setValue(e, strings.TrimSpace(p)); err != nil {
				return err
			}
			s = reflect.Append(s, e)
		}
		v.Set(s)
	default:
		return fmt.Errorf("cannot be set from the environment")
	}
	return nil
}
