package inspect

// Config holds every detector threshold. The zero value is not useful; start
// from DefaultConfig. TOML keys are the `toml` tags under [detect].
type Config struct {
	// Aggregator: a loop is reported when any score > Single, or two or more
	// scores > Pair, or the weighted combination > Combined.
	Single   float64 `toml:"single_threshold"`   // default 0.9
	Pair     float64 `toml:"pair_threshold"`     // default 0.7
	Combined float64 `toml:"combined_threshold"` // default 0.6

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
	OutputSimilarLast float64 `toml:"output_similar_last"` // output_repetition vs the last text (default 0.95)
	OutputSimilar2    float64 `toml:"output_similar_two"`  // output_repetition vs 2 recent texts (default 0.85)
	SummaryCount      int     `toml:"summary_count"`       // summary_loop: text-only turns (default 3)

	// Ignore lists tools that never count (e.g. todo_write, sequential_thinking).
	Ignore []string `toml:"ignore"`
	// MetadataArgs are argument keys left out of fingerprints (default task_progress).
	MetadataArgs []string `toml:"metadata_args"`
	// ErrorPatterns are extra regular expressions that mark a tool result as an error.
	ErrorPatterns []string `toml:"error_patterns"`

	// Tools holds per-tool overrides, keyed by tool name.
	Tools map[string]ToolOverride `toml:"tools"`
	// Models holds per-model overrides, keyed by a glob on the request's model.
	Models map[string]Override `toml:"models"`

	Stream StreamConfig `toml:"stream"`
}

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

// StreamConfig tunes the token_degeneration detector.
type StreamConfig struct {
	MinPhrase int `toml:"min_phrase"` // shortest repeated phrase in bytes (default 20)
	MaxPhrase int `toml:"max_phrase"` // longest repeated phrase in bytes (default 200)
	// Repeats is how many back-to-back repetitions of a phrase make a confident
	// degeneration outside code, tables and lists (default 8).
	Repeats int `toml:"repeats"`
	// StructuredRepeats is the higher count used inside code blocks, tables and lists (default 30).
	StructuredRepeats int `toml:"structured_repeats"`
	// RunLength is how many identical characters or words in a row count as a run (default 40 chars / 12 words).
	CharRun int `toml:"char_run"`
	WordRun int `toml:"word_run"`
	// Window bounds the bytes of recent text kept per stream (default 4096).
	Window int `toml:"window"`
}
