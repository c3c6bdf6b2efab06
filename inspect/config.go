package inspect

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Config holds every detector threshold. The zero value is not useful; start
// from DefaultConfig. TOML keys are the `toml` tags under [detect].
type Config struct {
	// Aggregator: a loop is reported when any score > Single, or two or more
	// scores > Pair, or the weighted combination > Combined.
	Single   float64 `toml:"single_threshold"`   // default 0.9
	Pair     float64 `toml:"pair_threshold"`     // default 0.7
	Combined float64 `toml:"combined_threshold"` // default 0.6
	// Weights scale each category's score in the weighted combination
	// (sum of weight*score, capped at 1). Categories left out weigh
	// DefaultWeight (0.8), so one warning-level detection (score >= 0.76)
	// is enough for a warning while scores at the bare trigger are not.
	Weights map[Category]float64 `toml:"weights"`

	// Window is how many recent steps the windowed rules look at (default 20).
	Window int `toml:"window"`

	RepeatConsecutive int     `toml:"repeat_consecutive"`  // tool_repetition: consecutive identical calls (default 3)
	RepeatInWindow    int     `toml:"repeat_in_window"`    // tool_repetition: identical calls in Window (default 5)
	CycleRepeats      int     `toml:"cycle_repeats"`       // tool_cycle: full repetitions of a 2..5 cycle (default 2)
	DriftCount        int     `toml:"drift_count"`         // param_drift: similar calls (default 4)
	DriftSimilarity   float64 `toml:"drift_similarity"`    // param_drift: argument similarity (default 0.8)
	SameResultCount   int     `toml:"same_result_count"`   // same_result (default 3)
	ErrorCount        int     `toml:"error_count"`         // error_cycle (default 3)
	WhackCycles       int     `toml:"whack_cycles"`        // whack_a_mole: A,B alternations (default 2)
	TestFixCount      int     `toml:"test_fix_count"`      // test_fix_cycle: failing runs (default 4)
	EditUndoCount     int     `toml:"edit_undo_count"`     // edit_undo: reverts (default 1)
	StateReturns      int     `toml:"state_returns"`       // edit_undo: restores to one state after attempts (default 5)
	OutputSimilarLast float64 `toml:"output_similar_last"` // output_repetition vs the last text (default 0.95)
	OutputSimilar2    float64 `toml:"output_similar_two"`  // output_repetition vs 2 recent texts (default 0.85)
	SummaryCount      int     `toml:"summary_count"`       // summary_loop: text-only turns (default 3)

	// Ignore lists tools that never count (e.g. todo_write, sequential_thinking).
	Ignore []string `toml:"ignore"`
	// MetadataArgs are argument keys left out of fingerprints (default task_progress).
	// They are matched at the top level of the arguments object only.
	MetadataArgs []string `toml:"metadata_args"`
	// ErrorPatterns are extra regular expressions that mark a tool result as an error.
	// They are compiled once by NewEngine; a bad pattern fails Validate.
	ErrorPatterns []string `toml:"error_patterns"`

	// Tools holds per-tool overrides, keyed by tool name.
	Tools map[string]ToolOverride `toml:"tools"`
	// Models holds per-model overrides, keyed by a glob (path.Match syntax)
	// on the request's model. When several globs match, the longest wins.
	Models map[string]Override `toml:"models"`

	Stream StreamConfig `toml:"stream"`

	// SessionCacheMB is the memory budget, in MiB, of the per-session cache
	// of parsed histories (see SessionCache); 0 turns it off (default 256).
	SessionCacheMB int `toml:"session_cache_mb"`
}

// DefaultWeight is the weight of a category missing from Config.Weights.
const DefaultWeight = 0.8

// ToolOverride changes thresholds for one tool. Zero fields inherit.
type ToolOverride struct {
	Ignore            bool `toml:"ignore"`
	RepeatConsecutive int  `toml:"repeat_consecutive"`
	RepeatInWindow    int  `toml:"repeat_in_window"`
}

// Override changes thresholds for models matching a glob. Zero fields inherit.
type Override struct {
	Single            float64  `toml:"single_threshold"`
	RepeatConsecutive int      `toml:"repeat_consecutive"`
	RepeatInWindow    int      `toml:"repeat_in_window"`
	ErrorCount        int      `toml:"error_count"`
	TestFixCount      int      `toml:"test_fix_count"`
	Disable           []string `toml:"disable"` // categories turned off for this model
}

// StreamConfig tunes the token_degeneration detector (see Degeneration).
// Zero fields take the value of DefaultStreamConfig, so the zero value works.
// Counts are back-to-back copies of the repeated unit; lengths are bytes.
type StreamConfig struct {
	MinPhrase int `toml:"min_phrase"` // shortest repeated phrase in bytes (default 20)
	MaxPhrase int `toml:"max_phrase"` // longest repeated phrase in bytes (default 200)
	// Repeats is how many back-to-back copies of a phrase make a confident
	// degeneration in prose (default 10, as gemini-cli's content loop
	// threshold: fewer copies of a sentence occur in healthy text).
	Repeats int `toml:"repeats"`
	// StructuredRepeats is the higher count used inside code blocks, tables,
	// lists, JSON and for units without words (default 30).
	StructuredRepeats int `toml:"structured_repeats"`
	// ShapeRepeats is the count for lines repeated with only their digits
	// changing ("attempt 3", "attempt 4", ...) in prose (default 16).
	ShapeRepeats int `toml:"shape_repeats"`
	// StructuredShapeRepeats is ShapeRepeats inside structured text, where
	// rows differing only in numbers are usually data (default 300).
	StructuredShapeRepeats int `toml:"structured_shape_repeats"`
	// CharRun is how many identical characters in a row count as a run in
	// prose, in bytes (default 100: longer than a 64-digit zero hash).
	CharRun int `toml:"char_run"`
	// WordRun is how many copies of a unit shorter than MinPhrase ("the ")
	// count as a run in prose; the run must also span CharRun bytes, so
	// "hahaha" needs 100 bytes (default 12).
	WordRun int `toml:"word_run"`
	// StructuredRun is the run length in bytes for short units in structured
	// text, whitespace and divider characters (default 1000).
	StructuredRun int `toml:"structured_run"`
	// Window bounds the bytes of recent text kept per stream, rounded up to
	// a power of two (default 4096; at least 2*(MaxPhrase+16)).
	Window int `toml:"window"`
	// LooseWindow is how many words in a row must repeat spans of 8 words
	// already seen twice, with at most 2 new words among them, to cut a loose
	// cycle: what a repetition penalty leaves of a degenerate answer, the same
	// hundred words cycling with small variations (default 192, 32..256).
	LooseWindow int `toml:"loose_window"`
}

// DefaultConfig returns the thresholds of docs/design.md section 3.
func DefaultConfig() Config {
	return Config{
		Single:            0.9,
		Pair:              0.7,
		Combined:          0.6,
		Window:            20,
		SessionCacheMB:    256,
		RepeatConsecutive: 3,
		RepeatInWindow:    5,
		CycleRepeats:      2,
		DriftCount:        4,
		DriftSimilarity:   0.8,
		SameResultCount:   3,
		ErrorCount:        3,
		WhackCycles:       2,
		TestFixCount:      4,
		EditUndoCount:     1,
		StateReturns:      5,
		OutputSimilarLast: 0.95,
		OutputSimilar2:    0.85,
		SummaryCount:      3,
		Ignore:            []string{"todo_write", "TodoWrite", "sequential_thinking", "update_plan", "think"},
		MetadataArgs:      []string{"task_progress"},
		Stream:            DefaultStreamConfig(),
	}
}

// Categories is every detector family, the one list of them: config keys
// are checked against it and observe's metric labels are built from it. It
// is an array so that its length is a constant others can size arrays by.
var Categories = [...]Category{
	ToolRepetition, ToolCycle, ParamDrift, SameResult, ErrorCycle, WhackAMole,
	TestFixCycle, EditUndo, OutputRepetition, SummaryLoop, TokenDegeneration, SemanticLoop,
}

func knownCategory(c string) bool {
	for _, k := range Categories {
		if string(k) == c {
			return true
		}
	}
	return false
}

// Validate reports every bad key at once, each named by its TOML key under
// [detect]. The stream keys are left to the streaming detector.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, why string) { errs = append(errs, fmt.Errorf("detect.%s: %s", key, why)) }
	prob := func(key string, v float64) {
		if !(v > 0 && v <= 1) { // also rejects NaN
			bad(key, fmt.Sprintf("must be in (0,1], got %v", v))
		}
	}
	pos := func(key string, v, min int) {
		if v < min {
			bad(key, fmt.Sprintf("must be >= %d, got %d", min, v))
		}
	}
	prob("single_threshold", c.Single)
	prob("pair_threshold", c.Pair)
	prob("combined_threshold", c.Combined)
	for cat, w := range c.Weights {
		if !knownCategory(string(cat)) {
			bad("weights."+string(cat), "unknown category")
		}
		if !(w >= 0 && w <= 1) {
			bad("weights."+string(cat), fmt.Sprintf("must be in [0,1], got %v", w))
		}
	}
	pos("window", c.Window, 2)
	pos("repeat_consecutive", c.RepeatConsecutive, 2)
	pos("repeat_in_window", c.RepeatInWindow, 2)
	pos("cycle_repeats", c.CycleRepeats, 2)
	pos("drift_count", c.DriftCount, 2)
	prob("drift_similarity", c.DriftSimilarity)
	pos("same_result_count", c.SameResultCount, 2)
	pos("error_count", c.ErrorCount, 2)
	pos("whack_cycles", c.WhackCycles, 2)
	pos("test_fix_count", c.TestFixCount, 2)
	pos("edit_undo_count", c.EditUndoCount, 1)
	pos("state_returns", c.StateReturns, 2)
	prob("output_similar_last", c.OutputSimilarLast)
	prob("output_similar_two", c.OutputSimilar2)
	pos("summary_count", c.SummaryCount, 2)
	pos("session_cache_mb", c.SessionCacheMB, 0)
	for i, p := range c.ErrorPatterns {
		if _, err := regexp.Compile(p); err != nil {
			bad(fmt.Sprintf("error_patterns[%d]", i), err.Error())
		}
	}
	for name, o := range c.Tools {
		if o.RepeatConsecutive < 0 || o.RepeatConsecutive == 1 {
			bad("tools."+name+".repeat_consecutive", fmt.Sprintf("must be 0 (inherit) or >= 2, got %d", o.RepeatConsecutive))
		}
		if o.RepeatInWindow < 0 || o.RepeatInWindow == 1 {
			bad("tools."+name+".repeat_in_window", fmt.Sprintf("must be 0 (inherit) or >= 2, got %d", o.RepeatInWindow))
		}
	}
	for glob, o := range c.Models {
		if _, err := path.Match(glob, ""); err != nil {
			bad("models."+glob, "bad glob: "+err.Error())
		}
		if o.Single != 0 && !(o.Single > 0 && o.Single <= 1) {
			bad("models."+glob+".single_threshold", fmt.Sprintf("must be 0 (inherit) or in (0,1], got %v", o.Single))
		}
		for key, v := range map[string]int{
			"repeat_consecutive": o.RepeatConsecutive, "repeat_in_window": o.RepeatInWindow,
			"error_count": o.ErrorCount, "test_fix_count": o.TestFixCount,
		} {
			if v < 0 || v == 1 {
				bad("models."+glob+"."+key, fmt.Sprintf("must be 0 (inherit) or >= 2, got %d", v))
			}
		}
		for _, d := range o.Disable {
			if !knownCategory(d) {
				bad("models."+glob+".disable", "unknown category "+d)
			}
		}
	}
	return errors.Join(errs...)
}

// MatchesModel reports whether the model glob pattern (path.Match syntax)
// matches model. A bad pattern matches nothing.
func MatchesModel(pattern, model string) bool {
	ok, err := path.Match(pattern, model)
	return err == nil && ok
}

// limits are the thresholds in force for one trajectory: Config with the
// matching model override applied.
type limits struct {
	*Config
	single            float64
	repeatConsecutive int
	repeatInWindow    int
	errorCount        int
	testFixCount      int
	disabled          []string
}

// resolve applies the longest matching model glob. Several matching globs
// are not merged: the most specific one is the intent of whoever wrote it.
func (c *Config) resolve(model string) limits {
	l := limits{Config: c, single: c.Single, repeatConsecutive: c.RepeatConsecutive,
		repeatInWindow: c.RepeatInWindow, errorCount: c.ErrorCount, testFixCount: c.TestFixCount}
	best := -1
	var o Override
	for glob, ov := range c.Models {
		if len(glob) > best && MatchesModel(glob, model) {
			best, o = len(glob), ov
		}
	}
	if best < 0 {
		return l
	}
	if o.Single > 0 {
		l.single = o.Single
	}
	if o.RepeatConsecutive > 0 {
		l.repeatConsecutive = o.RepeatConsecutive
	}
	if o.RepeatInWindow > 0 {
		l.repeatInWindow = o.RepeatInWindow
	}
	if o.ErrorCount > 0 {
		l.errorCount = o.ErrorCount
	}
	if o.TestFixCount > 0 {
		l.testFixCount = o.TestFixCount
	}
	l.disabled = o.Disable
	return l
}

func (l *limits) enabled(c Category) bool {
	for _, d := range l.disabled {
		if d == string(c) {
			return false
		}
	}
	return true
}

func (l *limits) weight(c Category) float64 {
	if w, ok := l.Weights[c]; ok {
		return w
	}
	return DefaultWeight
}

// ignored reports whether calls of tool never count.
func (c *Config) ignored(tool string) bool {
	if o, ok := c.Tools[tool]; ok && o.Ignore {
		return true
	}
	for _, n := range c.Ignore {
		if strings.EqualFold(n, tool) {
			return true
		}
	}
	return false
}
