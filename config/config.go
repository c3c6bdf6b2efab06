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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/loopguard/loopguard/proxy"
)

// EnvPrefix starts every environment variable loopguard reads.
const EnvPrefix = "LOOPGUARD_"

// ErrFlags is what Load's error wraps when the command line itself is wrong
// (an unknown flag, a flag without its value): the flag and the usage were
// written to stderr already.
var ErrFlags = errors.New("bad command line")

// Load builds the configuration for `loopguard serve` from args (without the
// program name) and the environment. The returned error names the bad key;
// flag.ErrHelp is returned for -h, and an error wrapping ErrFlags for a
// command line that does not parse.
func Load(name string, args []string, getenv func(string) string, stderr io.Writer) (proxy.Config, error) {
	cfg := proxy.DefaultConfig()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [-config FILE] [-upstream URL] [-listen ADDR] [flags]\n\n"+
			"Every key of the configuration file (config.example.toml) is also an environment variable:\n"+
			"%s<TABLE>_<KEY>, e.g. %sPOLICY_MODE=shadow. Flags override both.\n\nFlags:\n", name, EnvPrefix, EnvPrefix)
		fs.PrintDefaults()
	}
	file := fs.String("config", "", "TOML configuration `file` (env LOOPGUARD_CONFIG)")
	listen := fs.String("listen", "", "listen `address` (default 127.0.0.1:8787)")
	upstream := fs.String("upstream", "", "upstream base `URL`, with or without /v1 (env LOOPGUARD_UPSTREAM)")
	logFormat := fs.String("log-format", "", "log format: json or console")
	logLevel := fs.String("log-level", "", "log level: debug, info, warn, error")
	mode := fs.String("mode", "", "policy mode: enforce, shadow or off")
	pprof := fs.Bool("pprof", false, "serve Go's profiles at /loopguard/debug/pprof/ ([admin] pprof)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: %w", ErrFlags, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *file == "" {
		*file = getenv(EnvPrefix + "CONFIG")
	}
	// Every problem is reported at once: the file's keys, the environment's,
	// the flags', then what Validate finds in the rest.
	var errs []error
	if *file != "" {
		problems, err := decodeFile(*file, &cfg)
		if err != nil {
			return cfg, err
		}
		errs = append(errs, problems)
	}
	errs = append(errs, applyEnv(&cfg, getenv))
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
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "pprof" {
			cfg.Admin.Pprof = *pprof
		}
	})
	if *mode != "" {
		if err := setValue(reflect.ValueOf(&cfg.Policy.Mode).Elem(), *mode); err != nil {
			errs = append(errs, fmt.Errorf("-mode: %w", err))
		}
	}
	return cfg, errors.Join(append(errs, cfg.Validate())...)
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
	problems, err := decodeFile(path, &cfg)
	if err != nil {
		return cfg, err
	}
	return cfg, problems
}

// decodeFile decodes the file at path over cfg. A file that cannot be read
// or is not TOML is err. Otherwise every key is decoded on its own, so that
// one bad value hides neither the others nor unknown keys, and problems
// names them all (nil when there are none).
func decodeFile(path string, cfg *proxy.Config) (problems, err error) {
	var tables map[string]toml.Primitive
	md, err := toml.DecodeFile(path, &tables)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return nil, fmt.Errorf("%s: %s", path, perr.ErrorWithPosition())
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var d tableDecoder
	d.decode(&md, tables, reflect.ValueOf(cfg).Elem(), nil)
	errs, unknown := d.errs, d.unknown
	for _, k := range md.Undecoded() {
		// Unknown keys inside tables keyed by model or tool. The keys under
		// a failed or unknown key are left undecoded too; they are
		// reported once, with it.
		if !under(k.String(), d.failed) && !under(k.String(), d.unknown) {
			unknown = append(unknown, k.String())
		}
	}
	if len(unknown) > 0 {
		errs = append(errs, "unknown key(s): "+strings.Join(unknown, ", "))
	}
	for i, e := range errs {
		errs[i] = path + ": " + e
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n")), nil
	}
	return nil, nil
}

// tableDecoder decodes a TOML table key by key, collecting every problem.
type tableDecoder struct {
	errs    []string // what went wrong with each key that did not decode
	failed  []string // the paths of those keys
	unknown []string // the paths of keys that name no field
}

// decode decodes each key of table into the field of v (a struct) tagged
// with its name, descending into sub-tables that are structs.
func (d *tableDecoder) decode(md *toml.MetaData, table map[string]toml.Primitive, v reflect.Value, path []string) {
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := toml.Key(append(append([]string(nil), path...), k))
		f, ok := fieldByTag(v, k)
		if !ok {
			d.unknown = append(d.unknown, p.String())
			continue
		}
		var err error
		if f.Kind() == reflect.Struct && f.Type() != durationType {
			var sub map[string]toml.Primitive
			if err = md.PrimitiveDecode(table[k], &sub); err == nil {
				d.decode(md, sub, f, p)
				continue
			}
		} else {
			err = md.PrimitiveDecode(table[k], f.Addr().Interface())
		}
		if err != nil {
			d.errs = append(d.errs, err.Error())
			d.failed = append(d.failed, p.String())
		}
	}
}

// fieldByTag returns the field of v (a struct) whose toml tag is name.
func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); tag == name && t.Field(i).IsExported() {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// under reports whether key is one of paths or inside one of them.
func under(key string, paths []string) bool {
	for _, p := range paths {
		if key == p || strings.HasPrefix(key, p+".") {
			return true
		}
	}
	return false
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
