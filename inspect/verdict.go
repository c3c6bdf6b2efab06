package inspect

// Category names a detector family. The strings are part of the external
// contract: they appear in the X-Loopguard-Loop header, in replay output and
// in metrics labels.
type Category string

// The detector families of docs/design.md section 3.
const (
	ToolRepetition    Category = "tool_repetition"
	ToolCycle         Category = "tool_cycle"
	ParamDrift        Category = "param_drift"
	SameResult        Category = "same_result"
	ErrorCycle        Category = "error_cycle"
	WhackAMole        Category = "whack_a_mole"
	TestFixCycle      Category = "test_fix_cycle"
	EditUndo          Category = "edit_undo"
	OutputRepetition  Category = "output_repetition"
	SummaryLoop       Category = "summary_loop"
	TokenDegeneration Category = "token_degeneration"
	// SemanticLoop is the optional judge's finding: a model read a digest of
	// the trajectory and said the agent is stuck, in words no rule compares
	// (the same failing idea retried with different commands). Its score is
	// the judge's confidence; it is never computed by Engine.Inspect.
	SemanticLoop Category = "semantic_loop"
)

// CallRef points at one tool call of the trajectory that is part of the
// evidence.
type CallRef struct {
	Step       int    // index into Trajectory.Steps
	Message    int    // index of the assistant message in request.messages
	ToolCallID string // the call's id, "" for legacy function_call
	Name       string // tool name
	Args       string // canonical arguments (sorted keys, compact JSON) or trimmed text
}

// Evidence is what a detector saw. Step indices refer to Trajectory.Steps.
type Evidence struct {
	Element    string    // the repeated element, e.g. `bash(git status)` or a text snippet
	Tool       string    // tool name, "" for text-only families
	Args       string    // canonical arguments of the repeated call, "" if not a call
	Result     string    // the normalised result that did not change (shortened), if any
	Error      string    // the normalised error signature text, if any
	Count      int       // how many times the element occurred
	Threshold  int       // the count at which the rule fires
	First      int       // step index of the first occurrence
	Last       int       // step index of the last occurrence
	Steps      []int     // every step involved, ascending
	Calls      []CallRef // the calls involved, in order (for constraints and collapse)
	NoProgress bool      // results unchanged or the same error came back
}

// Detection is one detector family's finding.
type Detection struct {
	Category Category
	Score    float64 // in [0,1]
	Evidence Evidence
}

// Verdict is the aggregated result of all detectors over one trajectory.
// The zero Verdict means "no loop".
type Verdict struct {
	Loop       bool
	Category   Category    // category of the strongest detection
	Confidence float64     // score of the strongest detection, in [0,1]
	Detections []Detection // every detection with a score > 0, strongest first
	// PatternKey is a stable hash of the looping element (category + tool +
	// canonical args or text fingerprint), independent of call ids and turn
	// positions, so the same loop seen on the next request has the same key.
	PatternKey string
	// Err is set, wrapping ErrDetector, when a detector failed (a bug: it
	// panicked); the rest of the verdict is then zero, "no loop", so the
	// request passes through, and the caller counts and logs the failure.
	Err error
}
