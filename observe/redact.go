package observe

import (
	"net/url"
	"reflect"
	"strings"
	"time"
)

// Redacted replaces a secret's value in the effective config.
const Redacted = "[REDACTED]"

// secretKeys are config keys whose values are credentials. URL-valued keys
// (redis_url) keep everything but their password.
var secretKeys = []string{"api_key", "token", "password", "secret"}

func isSecretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range secretKeys {
		if k == s || strings.HasSuffix(k, "_"+s) {
			return true
		}
	}
	return false
}

// RedactConfig turns a configuration struct into plain JSON-ready values
// named by their toml tags (the keys users write), with secrets replaced by
// Redacted and passwords removed from URLs. Durations become strings
// ("50ms"). Unexported fields and fields tagged toml:"-" are left out.
func RedactConfig(cfg any) any {
	return redactValue(reflect.ValueOf(cfg), "")
}

var durationType = reflect.TypeFor[time.Duration]()

func redactValue(v reflect.Value, key string) any {
	if !v.IsValid() {
		return nil
	}
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return redactValue(v.Elem(), key)
	case reflect.Struct:
		out := map[string]any{}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			out[name] = redactValue(v.Field(i), name)
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		it := v.MapRange()
		for it.Next() {
			k := it.Key()
			if k.Kind() != reflect.String {
				continue
			}
			out[k.String()] = redactValue(it.Value(), k.String())
		}
		return out
	case reflect.Slice, reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = redactValue(v.Index(i), key)
		}
		return out
	case reflect.String:
		s := v.String()
		switch {
		case s == "":
			return s
		case isSecretKey(key):
			return Redacted
		case strings.HasSuffix(strings.ToLower(key), "url"):
			return redactURL(s)
		}
		return s
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint()
	case reflect.Float32, reflect.Float64:
		return v.Float()
	}
	return nil
}

// redactURL removes the password (and a token-like user) from a URL; an
// unparsable value is redacted whole, as it may still hold a secret.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return Redacted
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else if u.User.Username() != "" {
			// redis://:token@ or a bare token as user: treat the user as the secret.
			u.User = url.User("xxxxx")
		}
	}
	q := u.Query()
	changed := false
	for k := range q {
		if isSecretKey(k) {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}
