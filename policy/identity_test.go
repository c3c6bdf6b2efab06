package policy

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
)

// chatKey is the session key of a chat completions request.
func chatKey(header, body []byte) string { return Identify(wireapi.Chat, header, body).Key }

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
			got := chatKey(h, readFixture(t, tt.body))
			if strings.HasSuffix(tt.want, ":") {
				if !strings.HasPrefix(got, tt.want) || len(got) != len(tt.want)+16 {
					t.Fatalf("key = %q; want %q + 16 hex digits", got, tt.want)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("key = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestSessionKeyDerived: the derived key hashes what a run's first request
// already has, so every request of a run shares it, and so do reruns of the
// same prompt; the first assistant turn (Identity.Turn) tells reruns apart.
func TestSessionKeyDerived(t *testing.T) {
	tests := []struct {
		name              string
		a, b              string
		sameKey, sameTurn bool
	}{
		{name: "later requests of a run share the key", a: "tools.json", b: "tools_longer.json", sameKey: true, sameTurn: true},
		{name: "parts and string content hash alike", a: "tools.json", b: "tools_parts.json", sameKey: true, sameTurn: true},
		{name: "another run has other tool-call ids", a: "tools.json", b: "tools_rerun.json", sameKey: true, sameTurn: false},
		{name: "text-only first assistant turn identifies the run", a: "text_only.json", b: "text_only_other.json", sameKey: true, sameTurn: false},
		{name: "different model", a: "tools.json", b: "text_only.json", sameKey: false, sameTurn: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Identify(wireapi.Chat, nil, readFixture(t, tt.a))
			b := Identify(wireapi.Chat, nil, readFixture(t, tt.b))
			for _, id := range []Identity{a, b} {
				if !strings.HasPrefix(id.Key, derivedPrefix) || len(id.Key) != len(derivedPrefix)+16 || len(id.Turn) != 16 {
					t.Fatalf("derived identity %+v; want key h: + 16 hex digits and a 16-digit turn", id)
				}
			}
			if (a.Key == b.Key) != tt.sameKey || (a.Turn == b.Turn) != tt.sameTurn {
				t.Fatalf("Identify(%s) = %+v, Identify(%s) = %+v; want same key %v, same turn %v", tt.a, a, tt.b, b, tt.sameKey, tt.sameTurn)
			}
		})
	}
}

// TestSessionKeyDerivedHash holds derived keys and turns to their
// definition, FNV-1a 64 (hash/fnv) of the model, system and user texts
// (and the API's name, but for chat), each after its length (of the first assistant turn for the turn), in 16
// hex digits: keys an earlier version stored (redis) must go on naming their
// sessions.
func TestSessionKeyDerivedHash(t *testing.T) {
	ref := func(fields ...string) string {
		h := fnv.New64a()
		for _, s := range fields {
			var n [8]byte
			binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			h.Write([]byte(s))
		}
		return fmt.Sprintf("%016x", h.Sum64())
	}
	tests := []struct {
		name  string
		model string
		o     opening
	}{
		{"all empty", "", opening{}},
		{"no assistant turn yet", "gpt-4.1", opening{system: "You are an agent.", user: "Fix it.", haveSystem: true, haveUser: true}},
		{"with a turn", "m", opening{system: strings.Repeat("long system prompt ", 500), user: "héllo \x00", assistant: "call_1\x00call_2\x00",
			haveSystem: true, haveUser: true, haveAssistant: true}},
		{"another API", "gpt-4.1", opening{system: "You are an agent.", user: "Fix it.", api: "responses", haveSystem: true, haveUser: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := Identity{Key: derivedPrefix + ref(tt.model, tt.o.system, tt.o.user)}
			if tt.o.api != "" {
				want.Key = derivedPrefix + ref(tt.model, tt.o.system, tt.o.user, tt.o.api)
			}
			if tt.o.haveAssistant {
				want.Turn = ref(tt.o.assistant)
			}
			if got := derivedIdentity(tt.o, &Fields{model: tt.model}); got != want {
				t.Errorf("derivedIdentity = %+v; want %+v", got, want)
			}
		})
	}
	h := fnv.New64a()
	h.Write([]byte("loop pattern"))
	if got, want := hashString("loop pattern"), fmt.Sprintf("%016x", h.Sum64()); got != want {
		t.Errorf("hashString = %s; want %s", got, want)
	}
}

func TestSessionKeyMalformed(t *testing.T) {
	for _, body := range []string{"", "null", "[]", "{", `{"messages":"x"}`, `{"messages":[1,2,{"role":7}]}`} {
		k := chatKey(nil, []byte(body))
		if !strings.HasPrefix(k, derivedPrefix) {
			t.Errorf("chatKey(%q) = %q; want a derived key", body, k)
		}
	}
	if got := chatKey(nil, readFixture(t, "truncated.json")); got != chatKey(nil, readFixture(t, "truncated.json")) {
		t.Errorf("the key of a truncated body is not deterministic: %q", got)
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
		k := chatKey(header, body)
		if k == "" || len(k) > MaxKeyLen {
			t.Fatalf("key = %q (len %d); want 1..%d bytes", k, len(k), MaxKeyLen)
		}
		if !printable([]byte(k)) {
			t.Fatalf("key = %q; holds bytes unsafe in a header", k)
		}
		if k != chatKey(header, body) {
			t.Fatal("the key is not deterministic")
		}
	})
}
