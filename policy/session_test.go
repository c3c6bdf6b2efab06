package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "sessionkey", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSessionKeyExplicit(t *testing.T) {
	tests := []struct {
		name   string
		header string
		body   string // fixture
		want   string
	}{
		{name: "header wins", header: "sess-1", body: "user_field.json", want: "sess-1"},
		{name: "header trimmed", header: "  sess-1\t", body: "user_field.json", want: "sess-1"},
		{name: "blank header falls through to user", header: "   ", body: "user_field.json", want: "alice-42"},
		{name: "user before metadata", body: "user_field.json", want: "alice-42"},
		{name: "metadata session_id", body: "metadata.json", want: "meta-1"},
		{name: "long header is hashed", header: strings.Repeat("a", MaxKeyLen+1), body: "metadata.json", want: "x:"},
		{name: "header at the cap is kept", header: strings.Repeat("a", MaxKeyLen), body: "metadata.json", want: strings.Repeat("a", MaxKeyLen)},
		{name: "CRLF in user is hashed, never echoed", body: "user_crlf.json", want: "x:"},
		{name: "object user is not an id", body: "user_object.json", want: "h:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h []byte
			if tt.header != "" {
				h = []byte(tt.header)
			}
			got := SessionKey(h, readFixture(t, tt.body))
			if strings.HasSuffix(tt.want, ":") {
				if !strings.HasPrefix(got, tt.want) || len(got) != len(tt.want)+16 {
					t.Fatalf("SessionKey = %q; want %q + 16 hex digits", got, tt.want)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("SessionKey = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestSessionKeyDerived(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{name: "later requests of a run share the key", a: "tools.json", b: "tools_longer.json", same: true},
		{name: "parts and string content hash alike", a: "tools.json", b: "tools_parts.json", same: true},
		{name: "another run has other tool-call ids", a: "tools.json", b: "tools_rerun.json", same: false},
		{name: "text-only first assistant turn identifies the run", a: "text_only.json", b: "text_only_other.json", same: false},
		{name: "different model", a: "tools.json", b: "text_only.json", same: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka := SessionKey(nil, readFixture(t, tt.a))
			kb := SessionKey(nil, readFixture(t, tt.b))
			for _, k := range []string{ka, kb} {
				if !strings.HasPrefix(k, derivedPrefix) || len(k) != len(derivedPrefix)+16 {
					t.Fatalf("derived key %q; want h: + 16 hex digits", k)
				}
			}
			if (ka == kb) != tt.same {
				t.Fatalf("SessionKey(%s) = %q, SessionKey(%s) = %q; same = %v, want %v", tt.a, ka, tt.b, kb, ka == kb, tt.same)
			}
		})
	}
}

func TestSessionKeyMalformed(t *testing.T) {
	for _, body := range []string{"", "null", "[]", "{", `{"messages":"x"}`, `{"messages":[1,2,{"role":7}]}`} {
		k := SessionKey(nil, []byte(body))
		if !strings.HasPrefix(k, derivedPrefix) {
			t.Errorf("SessionKey(%q) = %q; want a derived key", body, k)
		}
	}
	if got := SessionKey(nil, readFixture(t, "truncated.json")); got != SessionKey(nil, readFixture(t, "truncated.json")) {
		t.Errorf("SessionKey of a truncated body is not deterministic: %q", got)
	}
}

func FuzzSessionKey(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "sessionkey"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		f.Add([]byte(nil), readFixture(f, e.Name()))
	}
	f.Add([]byte("sess\r\nX: y"), []byte(`{}`))
	f.Fuzz(func(t *testing.T, header, body []byte) {
		k := SessionKey(header, body)
		if k == "" || len(k) > MaxKeyLen {
			t.Fatalf("SessionKey = %q (len %d); want 1..%d bytes", k, len(k), MaxKeyLen)
		}
		if !printable([]byte(k)) {
			t.Fatalf("SessionKey = %q; holds bytes unsafe in a header", k)
		}
		if k != SessionKey(header, body) {
			t.Fatal("SessionKey is not deterministic")
		}
	})
}
