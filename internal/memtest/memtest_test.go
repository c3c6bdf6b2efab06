package memtest

import (
	"strings"
	"testing"
)

func TestWithin(t *testing.T) {
	buf := strings.Repeat("ab", 8)
	tests := []struct {
		name string
		give string
		want bool
	}{
		{"substring", buf[3:7], true},
		{"whole", buf, true},
		{"last byte", buf[len(buf)-1:], true},
		{"copy", strings.Clone(buf[3:7]), false},
		{"empty substring", buf[4:4], false},
		{"other string", "ab", false},
	}
	for _, tt := range tests {
		if got := Within(tt.give, buf); got != tt.want {
			t.Errorf("Within(%s) = %v; want %v", tt.name, got, tt.want)
		}
	}
}
