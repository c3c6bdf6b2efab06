package inject

import (
	"crypto/rand"
	"io"
	"path"
	"time"

	"github.com/loopguard/loopguard/inspect"
)

// Injector renders loopguard's texts and patches requests with one
// configuration. It is safe for concurrent use.
type Injector struct {
	cfg Config
	tpl templates

	// now and random are the clock and the id source of LOOP_DETECTED
	// answers; tests replace them to get stable golden files.
	now    func() time.Time
	random io.Reader
}

// New validates cfg (empty fields mean their defaults) and returns an
// Injector.
func New(cfg Config) (*Injector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tpl, err := parseTemplates(cfg)
	if err != nil {
		return nil, err
	}
	return &Injector{cfg: cfg, tpl: tpl, now: time.Now, random: rand.Reader}, nil
}

// Placement returns the placement for a model: the first override whose
// pattern matches, else Config.Placement.
func (in *Injector) Placement(model string) Placement {
	for _, o := range in.cfg.Overrides {
		if ok, _ := path.Match(o.Model, model); ok {
			return o.Placement
		}
	}
	return in.cfg.Placement
}

// Edit is everything to change in one request. Its texts are combined into a
// single insertion, in this order: the degeneration notice, the
// <loop-recovery> blocks, the warnings.
type Edit struct {
	// Degenerated, when set, tells the model its last answer was cut.
	Degenerated *Degeneration
	// Constraints are the <loop-recovery> blocks: a new one and those of
	// patterns whose constraints are still active. A Loop with Collapse set
	// also has its repeats removed from the history first.
	Constraints []Loop
	// Warnings are the warn notices.
	Warnings []Loop

	// Model is the request's model, for the per-model placement; "" reads
	// it from the body.
	Model string
	// Dst, when it has room, is where the new body is built, so that the
	// caller can reuse its buffers for bodies of hundreds of kilobytes; nil
	// allocates. Result.Body aliases it then.
	Dst []byte
	// Layout, when known (inspect.Trajectory.Layout of this very body),
	// spares the insertion its search for the messages array. It is not
	// used after a collapse, which moves them, nor where it does not match
	// the body.
	Layout inspect.Layout
}

// Result is the outcome of Apply.
type Result struct {
	// Body is the new request body; it is the original body, unchanged and
	// not copied, when the edit is empty.
	Body []byte
	// Placement is where the texts went; "" when nothing was inserted.
	Placement Placement
	// Collapsed sums the collapses made.
	Collapsed Collapsed
}

// Apply patches a chat request body: first the collapses the edit asks for,
// then one insertion of all its texts at the placement configured for the
// request's model. On error the caller sends the original body (fail open).
// body is not modified.
func (in *Injector) Apply(body []byte, e Edit) (Result, error) {
	layout := e.Layout
	if len(collapseCalls(e)) > 0 {
		layout = inspect.Layout{} // the collapse moves the messages
	}
	return in.applyTexts(body, e, in.Collapse, func(b []byte, p Placement, text string) ([]byte, Placement, error) {
		return insert(e.Dst, b, p, text, layout)
	})
}
