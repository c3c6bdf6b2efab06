package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

// TestTrimmerAppendTruncated: the event the repetition begins in keeps the
// text before it, and never half a character: a cut inside a multi-byte
// character keeps the characters before it.
func TestTrimmerAppendTruncated(t *testing.T) {
	events := map[string]string{
		"choices.0.delta.content": `{"id":"c","choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}`,
		"delta":                   `{"type":"response.output_text.delta","sequence_number":4,"delta":%s}`,
		"delta.text":              `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}`,
	}
	tests := []struct {
		name string
		text string
		keep int
		want string // "" when the event is dropped
	}{
		{"ascii", "abcdef", 3, "abc"},
		{"before a two-byte character", "abé", 2, "ab"},
		{"inside a two-byte character", "abé", 3, "ab"},
		{"after a two-byte character", "abéc", 4, "abé"},
		{"inside a four-byte character", "a🙂b", 3, "a"},
		{"inside the first character", "éa", 1, ""},
		{"the whole text", "abé", 4, "abé"},
		{"nothing", "abc", 0, ""},
	}
	for path, format := range events {
		for _, tt := range tests {
			t.Run(path+"/"+tt.name, func(t *testing.T) {
				var tr trimmer
				data := strings.Replace(format, "%s", string(mustJSON(t, tt.text)), 1)
				e := trimmed{data: tr.keep([]byte(data))}
				got := string(tr.appendTruncated(nil, &e, tt.keep, path, wireapi.SSE))
				if tt.want == "" {
					if got != "" {
						t.Fatalf("appendTruncated = %q; want the event dropped", got)
					}
					return
				}
				payload, ok := strings.CutPrefix(got, "data: ")
				if !ok || !strings.HasSuffix(payload, "\n\n") {
					t.Fatalf("appendTruncated = %q; want one data event", got)
				}
				text := gjson.Get(payload, path).String()
				if text != tt.want || !utf8.ValidString(gjson.Get(payload, path).Raw) {
					t.Errorf("text = %q (raw %s); want %q", text, gjson.Get(payload, path).Raw, tt.want)
				}
			})
		}
	}
}

func TestTrimmerReleaseAndReset(t *testing.T) {
	var tr trimmer
	for i, span := range [][2]int64{{0, 10}, {10, 25}, {25, 40}} {
		raw := "data: " + strings.Repeat(string(rune('a'+i)), 3) + "\n\n"
		tr.queue = append(tr.queue, trimmed{raw: tr.keep([]byte(raw)), start: span[0], end: span[1]})
	}
	if got := string(tr.release(nil, 24)); got != "data: aaa\n\n" {
		t.Errorf("release(24) = %q; want the event ending at 10 only", got)
	}
	if got := string(tr.release(nil, 40)); got != "data: bbb\n\ndata: ccc\n\n" {
		t.Errorf("release(40) = %q; want the two events left, in order", got)
	}
	if len(tr.queue) != 0 || len(tr.buf) != 0 {
		t.Errorf("after releasing all: %d events, %d bytes held; want none", len(tr.queue), len(tr.buf))
	}
	tr.queue = append(tr.queue, trimmed{raw: tr.keep([]byte("data: x\n\n")), end: 5})
	tr.reset()
	if len(tr.queue) != 0 || len(tr.buf) != 0 {
		t.Errorf("after reset: %+v; want a trimmer holding nothing", tr)
	}
}

func mustJSON(t *testing.T, s string) []byte {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
