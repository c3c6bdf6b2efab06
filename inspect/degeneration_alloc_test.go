//go:build !race

package inspect

import (
	"strings"
	"testing"
)

// TestDegenerationZeroAllocs holds Write to its budget: no allocation per
// delta, healthy or looping, once the detector exists.
func TestDegenerationZeroAllocs(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{"prose", "The copy job must be idempotent, because it will be interrupted at least once. "},
		{"loop below threshold", strings.Repeat("Wait, I'll write the schema first. ", 4)},
		{"table", "| a | 1 |\n| b | 2 |\n```\ncode\n```\n"},
		// Over 1,000 words: the loose-cycle table fills and evicts.
		{"long table", tableText(200)},
		{"loose cycle", looseText(1, 60, 120, 8, 40, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDegeneration(StreamConfig{})
			p := []byte(tt.give)
			allocs := testing.AllocsPerRun(200, func() {
				d.Reset()
				d.Write(p)
			})
			if allocs != 0 {
				t.Errorf("Write allocates %v times per run; want 0", allocs)
			}
		})
	}
}
