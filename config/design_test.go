package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/proxy"
)

// designDoc returns docs/design.md, which every clone has: the test never
// skips.
func designDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "design.md")) // tests run in config/
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// designTable returns the rows of docs/design.md's detector table: category (the
// first word of the first column) to its signal and default trigger cells.
func designTable(t *testing.T, doc string) map[string][2]string {
	t.Helper()
	const header = "| category | signal | default trigger |"
	i := strings.Index(doc, header)
	if i < 0 {
		t.Fatalf("docs/design.md has no detector table (%q)", header)
	}
	rows := map[string][2]string{}
	for _, line := range strings.Split(doc[i:], "\n")[2:] { // past the header and its rule
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("docs/design.md table row with %d cells; want 3: %s", len(cells), line)
		}
		category, _, _ := strings.Cut(strings.TrimSpace(cells[0]), " ")
		rows[category] = [2]string{strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])}
	}
	return rows
}

// hasFigure reports whether text holds want, followed by neither a digit
// nor a decimal point ("3" is not in "30" or "3.5").
func hasFigure(text, want string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], want)
		if j < 0 {
			return false
		}
		end := i + j + len(want)
		if end == len(text) || !strings.ContainsRune("0123456789.", rune(text[end])) {
			return true
		}
		i = end
	}
}

// TestDesignThresholds holds docs/design.md's detector table and aggregator
// thresholds to DefaultConfig (config.example.toml is held to it by
// TestExampleDocumentsEveryKey): a default changed on one side only fails
// here, and so does a detector added to one and not the other.
func TestDesignThresholds(t *testing.T) {
	doc := designDoc(t)
	d := proxy.DefaultConfig().Detect
	tests := []struct {
		category string
		signal   string // a figure the signal cell states, "" for none
		trigger  string // what the default trigger cell starts with
	}{
		{"tool_repetition", "", fmt.Sprintf("%d consecutive, or %d in the last %d steps", d.RepeatConsecutive, d.RepeatInWindow, d.Window)},
		{"tool_cycle", "", fmt.Sprintf("%d full repetitions", d.CycleRepeats)},
		{"param_drift", fmt.Sprintf(">= %g", d.DriftSimilarity), fmt.Sprint(d.DriftCount)},
		{"same_result", "", fmt.Sprint(d.SameResultCount)},
		{"error_cycle", "", fmt.Sprint(d.ErrorCount)},
		{"whack_a_mole", "", fmt.Sprintf("%d cycles", d.WhackCycles)},
		{"test_fix_cycle", "", fmt.Sprint(d.TestFixCount)},
		{"edit_undo", "", fmt.Sprintf("%d revert repeated; %d returns to one state", d.EditUndoCount, d.StateReturns)},
		{"output_repetition", "", fmt.Sprintf(">= %g to the last, or >= %g to 2 recent", d.OutputSimilarLast, d.OutputSimilar2)},
		{"summary_loop", "", fmt.Sprint(d.SummaryCount)},
		{"token_degeneration", fmt.Sprintf("a phrase of %d-%d chars", d.Stream.MinPhrase, d.Stream.MaxPhrase),
			fmt.Sprintf("cut when confident (%d copies of a phrase in prose, %d in code", d.Stream.Repeats, d.Stream.StructuredRepeats)},
	}
	rows := designTable(t, doc)
	var listed []string
	for _, tt := range tests {
		listed = append(listed, tt.category)
		t.Run(tt.category, func(t *testing.T) {
			row, ok := rows[tt.category]
			if !ok {
				t.Fatalf("docs/design.md's table has no %s row", tt.category)
			}
			if signal := row[0]; tt.signal != "" && !hasFigure(signal, tt.signal) {
				t.Errorf("docs/design.md's %s signal is %q; DefaultConfig says %q", tt.category, signal, tt.signal)
			}
			if trigger := row[1]; !strings.HasPrefix(trigger, tt.trigger) || !hasFigure(trigger[:min(len(trigger), len(tt.trigger)+1)], tt.trigger) {
				t.Errorf("docs/design.md's %s trigger is %q; DefaultConfig says %q", tt.category, trigger, tt.trigger)
			}
		})
	}
	for category := range rows {
		if !slices.Contains(listed, category) {
			t.Errorf("docs/design.md's table has a %s row this test does not hold to DefaultConfig", category)
		}
	}
	t.Run("aggregator", func(t *testing.T) {
		for _, want := range []string{
			fmt.Sprintf("any score > %g, or two or more > %g, or a weighted combination > %g", d.Single, d.Pair, d.Combined),
			fmt.Sprintf("%g for a category without a weight", inspect.DefaultWeight),
		} {
			if !hasFigure(strings.Join(strings.Fields(doc), " "), want) {
				t.Errorf("docs/design.md does not say %q", want)
			}
		}
	})
}
