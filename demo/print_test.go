package demo

import (
	"reflect"
	"strings"
	"testing"
)

func TestWrap(t *testing.T) {
	tests := []struct {
		name  string
		give  string
		width int
		want  []string
	}{
		{"short", "a b c", 10, []string{"a b c"}},
		{"breaks at spaces", "aaa bbb ccc", 7, []string{"aaa bbb", "ccc"}},
		{"long word alone", "a bbbbbbbbbb c", 4, []string{"a", "bbbbbbbbbb", "c"}},
		{"keeps newlines", "a\n\nb", 10, []string{"a", "", "b"}},
		{"folds runs of spaces", "a    b", 10, []string{"a b"}},
		{"empty", "", 10, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wrap(tt.give, tt.width); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("wrap(%q, %d) = %q; want %q", tt.give, tt.width, got, tt.want)
			}
		})
	}
}

func TestShorten(t *testing.T) {
	tests := []struct {
		name string
		give string
		n    int
		want string
	}{
		{"fits", "abc", 3, "abc"},
		{"cut", "abcdef", 3, "abc..."},
		{"rune boundary", "aé", 2, "a..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := shorten(tt.give, tt.n); got != tt.want {
				t.Errorf("shorten(%q, %d) = %q; want %q", tt.give, tt.n, got, tt.want)
			}
		})
	}
}

func TestPrinterBlockLimit(t *testing.T) {
	var b strings.Builder
	p := &printer{w: &b}
	p.block("1\n2\n3\n4\n", 2)
	got := b.String()
	if !strings.Contains(got, "| 2") || strings.Contains(got, "| 3") || !strings.Contains(got, "(2 more lines)") {
		t.Errorf("block(4 lines, max 2) =\n%s\nwant lines 1-2 and a note of 2 more", got)
	}
}

func TestPaint(t *testing.T) {
	tests := []struct {
		name  string
		color bool
		give  string
		want  string
	}{
		{"off", false, "x", "x"},
		{"on", true, "x", "\x1b[31mx\x1b[0m"},
		{"empty stays empty", true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &printer{color: tt.color}
			if got := p.paint(sgrRed, tt.give); got != tt.want {
				t.Errorf("paint(%q) = %q; want %q", tt.give, got, tt.want)
			}
		})
	}
}
