package inject

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"text/template"
)

// Placement says where injected text goes in the request's messages.
type Placement string

// The placements. The strings are the values of the `placement` config key.
const (
	// Auto picks by the shape of the history so that a strict chat template
	// accepts the result: after a tool result it appends to that result,
	// after a user message it appends to that message, otherwise it adds a
	// trailing user message.
	Auto Placement = "auto"
	// Tool appends to the content of the last tool (or legacy function)
	// message; with no such message it falls back to User.
	Tool Placement = "tool"
	// User appends to the last message when it is a user message, else adds a
	// trailing user message.
	User Placement = "user"
	// System merges into the first system (or developer) message, adding one
	// at index 0 only when the request has none: many chat templates reject a
	// system message that is not first.
	System Placement = "system"
)

func (p Placement) valid() bool {
	switch p {
	case Auto, Tool, User, System:
		return true
	}
	return false
}

// TerminateAs says how a terminate action answers the agent.
type TerminateAs string

// The termination forms (docs/design.md section 4).
const (
	// AsMessage answers HTTP 200 with an assistant message whose content
	// starts with LOOP_DETECTED:, streamed when the request streams.
	AsMessage TerminateAs = "message"
	// AsError answers with an OpenAI-shaped error of type loop_detected and a
	// status the official SDKs do not retry.
	AsError TerminateAs = "error"
)

// Override sets the placement for requests whose model matches a glob.
type Override struct {
	// Model is a path.Match pattern on the request's "model" field,
	// e.g. "mistral*" or "*/Llama-3*".
	Model string `toml:"model"`
	// Placement applies to matching requests.
	Placement Placement `toml:"placement"`
}

// Config is inject's configuration, the [inject] table of the config file.
// The zero value works and means the defaults; every empty template means its
// default text.
//
// Templates are Go text/template strings. Warn and Constrain templates see a
// Notice, Degenerated sees a Notice with Rule and Result set, Terminate sees a
// Notice, CollapseNote sees a CollapseNote.
type Config struct {
	// Placement is where injected text goes (default auto).
	Placement Placement `toml:"placement"`
	// Overrides set the placement per model; the first matching entry wins.
	Overrides []Override `toml:"overrides"`

	// WarnTemplate renders the warn action's notice. Default DefaultWarnTemplate.
	WarnTemplate string `toml:"warn_template"`
	// ConstrainTemplate renders the <loop-recovery> block. Default DefaultConstrainTemplate.
	ConstrainTemplate string `toml:"constrain_template"`
	// DegeneratedTemplate renders the notice sent after a cut stream. Default DefaultDegeneratedTemplate.
	DegeneratedTemplate string `toml:"degenerated_template"`
	// TerminateTemplate renders the LOOP_DETECTED answer's content. Its output
	// must start with "LOOP_DETECTED:". Default DefaultTerminateTemplate.
	TerminateTemplate string `toml:"terminate_template"`
	// CollapseNoteTemplate renders the note added to the kept result of a
	// collapsed loop. Default DefaultCollapseNoteTemplate.
	CollapseNoteTemplate string `toml:"collapse_note_template"`

	// Suggestions replace the built-in suggestions of the <loop-recovery>
	// block, keyed by category (e.g. "error_cycle"); the key "default" serves
	// categories without an entry. Empty: the built-in lists.
	Suggestions map[string][]string `toml:"suggestions"`

	// MaxTextBytes bounds one rendered text; arguments and results inside it
	// are cut first (default 4096, minimum 512).
	MaxTextBytes int `toml:"max_text_bytes"`
	// MaxFieldBytes bounds each argument, result or error snippet quoted in a
	// text (default 300).
	MaxFieldBytes int `toml:"max_field_bytes"`

	// TerminateAs is "message" (default) or "error".
	TerminateAs TerminateAs `toml:"terminate_as"`
	// ErrorStatus is the HTTP status of the error form (default 422). It must
	// be a 4xx the official OpenAI SDKs do not retry: not 408, 409 or 429.
	ErrorStatus int `toml:"error_status"`
}

// Default values of Config.
const (
	DefaultMaxTextBytes  = 4096
	DefaultMaxFieldBytes = 300
	DefaultErrorStatus   = 422
)

// DefaultConfig returns the configuration with every default spelled out.
func DefaultConfig() Config {
	return Config{
		Placement:            Auto,
		WarnTemplate:         DefaultWarnTemplate,
		ConstrainTemplate:    DefaultConstrainTemplate,
		DegeneratedTemplate:  DefaultDegeneratedTemplate,
		TerminateTemplate:    DefaultTerminateTemplate,
		CollapseNoteTemplate: DefaultCollapseNoteTemplate,
		MaxTextBytes:         DefaultMaxTextBytes,
		MaxFieldBytes:        DefaultMaxFieldBytes,
		TerminateAs:          AsMessage,
		ErrorStatus:          DefaultErrorStatus,
	}
}

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Placement == "" {
		c.Placement = d.Placement
	}
	if c.WarnTemplate == "" {
		c.WarnTemplate = d.WarnTemplate
	}
	if c.ConstrainTemplate == "" {
		c.ConstrainTemplate = d.ConstrainTemplate
	}
	if c.DegeneratedTemplate == "" {
		c.DegeneratedTemplate = d.DegeneratedTemplate
	}
	if c.TerminateTemplate == "" {
		c.TerminateTemplate = d.TerminateTemplate
	}
	if c.CollapseNoteTemplate == "" {
		c.CollapseNoteTemplate = d.CollapseNoteTemplate
	}
	if c.MaxTextBytes == 0 {
		c.MaxTextBytes = d.MaxTextBytes
	}
	if c.MaxFieldBytes == 0 {
		c.MaxFieldBytes = d.MaxFieldBytes
	}
	if c.TerminateAs == "" {
		c.TerminateAs = d.TerminateAs
	}
	if c.ErrorStatus == 0 {
		c.ErrorStatus = d.ErrorStatus
	}
	return c
}

// retriedStatus reports whether the official OpenAI SDKs (Python, Node, Go)
// retry a response with this status: 408, 409, 429 and every 5xx. A
// termination answered with one of them would be sent again by the SDK,
// straight back into the loop.
func retriedStatus(code int) bool {
	return code == 408 || code == 409 || code == 429 || code >= 500
}

// Validate reports every problem of c at once. Empty fields are valid: they
// mean the defaults.
func (c Config) Validate() error {
	var errs []error
	c = c.withDefaults()
	if !c.Placement.valid() {
		errs = append(errs, fmt.Errorf("inject: placement %q: want auto, tool, user or system", c.Placement))
	}
	for i, o := range c.Overrides {
		if _, err := path.Match(o.Model, ""); err != nil {
			errs = append(errs, fmt.Errorf("inject: overrides[%d]: model pattern %q: %w", i, o.Model, err))
		}
		if !o.Placement.valid() {
			errs = append(errs, fmt.Errorf("inject: overrides[%d]: placement %q: want auto, tool, user or system", i, o.Placement))
		}
	}
	if _, err := parseTemplates(c); err != nil {
		errs = append(errs, err)
	}
	if c.MaxTextBytes < 512 {
		errs = append(errs, fmt.Errorf("inject: max_text_bytes %d: want at least 512", c.MaxTextBytes))
	}
	if c.MaxFieldBytes < 16 || c.MaxFieldBytes > c.MaxTextBytes/2 {
		errs = append(errs, fmt.Errorf("inject: max_field_bytes %d: want 16 to max_text_bytes/2", c.MaxFieldBytes))
	}
	if c.TerminateAs != AsMessage && c.TerminateAs != AsError {
		errs = append(errs, fmt.Errorf("inject: terminate_as %q: want message or error", c.TerminateAs))
	}
	if c.ErrorStatus < 400 || c.ErrorStatus > 499 || retriedStatus(c.ErrorStatus) {
		errs = append(errs, fmt.Errorf("inject: error_status %d: want a 4xx other than 408, 409 and 429, which OpenAI SDKs retry", c.ErrorStatus))
	}
	return errors.Join(errs...)
}

// templates are the parsed templates of one Config.
type templates struct {
	warn, constrain, degenerated, terminate, note *template.Template
}

func parseTemplates(c Config) (templates, error) {
	var (
		t    templates
		errs []error
	)
	parse := func(name, text string) *template.Template {
		tp, err := template.New(name).Option("missingkey=error").Parse(text)
		if err != nil {
			errs = append(errs, fmt.Errorf("inject: %s: %w", name, err))
			return nil
		}
		return tp
	}
	t.warn = parse("warn_template", c.WarnTemplate)
	t.constrain = parse("constrain_template", c.ConstrainTemplate)
	t.degenerated = parse("degenerated_template", c.DegeneratedTemplate)
	t.terminate = parse("terminate_template", c.TerminateTemplate)
	t.note = parse("collapse_note_template", c.CollapseNoteTemplate)
	if len(errs) > 0 {
		return t, errors.Join(errs...)
	}
	// Execute each against sample data so that a template naming a field
	// that does not exist fails at start-up, not on the first loop.
	sample := sampleNotice()
	for _, x := range []struct {
		tp   *template.Template
		data any
	}{{t.warn, sample}, {t.constrain, sample}, {t.degenerated, sample}, {t.terminate, sample}, {t.note, CollapseNote{Count: 3, Removed: 2}}} {
		var b strings.Builder
		if err := x.tp.Execute(&b, x.data); err != nil {
			errs = append(errs, fmt.Errorf("inject: %w", err))
			continue
		}
		if x.tp == t.terminate && !strings.HasPrefix(b.String(), TerminatePrefix) {
			errs = append(errs, fmt.Errorf("inject: terminate_template: output must start with %q", TerminatePrefix))
		}
	}
	return t, errors.Join(errs...)
}
