package inject

import (
	"crypto/rand"
	"github.com/loopguard/loopguard/internal/rawjson"
	"io"
	"path"
	"strings"
	"time"

	"github.com/loopguard/loopguard/inspect"
	"github.com/tidwall/gjson"
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
	res := Result{Body: body}
	var texts []string
	if e.Degenerated != nil {
		t, err := in.Degenerated(*e.Degenerated)
		if err != nil {
			return Result{Body: body}, err
		}
		texts = append(texts, t)
	}
	// One collapse over the calls of every collapsing loop: the evidence's
	// message indices refer to the original body, so collapsing loop by loop
	// would read the second loop's indices against a shortened history.
	var calls []inspect.CallRef
	for _, l := range e.Constraints {
		if l.Collapse {
			calls = append(calls, evidence(l.Verdict).Calls...)
		}
	}
	if len(calls) > 0 {
		nb, c, err := in.Collapse(body, calls)
		if err != nil {
			return Result{Body: body}, err
		}
		res.Body, res.Collapsed = nb, c
	}
	for _, l := range e.Constraints {
		if l.Collapse {
			l.Reset = res.Collapsed.Turns
		}
		t, err := in.Constraint(l)
		if err != nil {
			return Result{Body: body}, err
		}
		texts = append(texts, t)
	}
	for _, l := range e.Warnings {
		t, err := in.Warning(l)
		if err != nil {
			return Result{Body: body}, err
		}
		texts = append(texts, t)
	}
	if len(texts) == 0 {
		return res, nil
	}
	model := e.Model
	if model == "" {
		model = gjson.Get(rawjson.View(res.Body), "model").String()
	}
	layout := e.Layout
	if len(calls) > 0 {
		layout = inspect.Layout{} // the collapse moved the messages
	}
	nb, used, err := insert(e.Dst, res.Body, in.Placement(model), strings.Join(texts, "\n\n"), layout)
	if err != nil {
		return Result{Body: body}, err
	}
	res.Body = nb
	res.Placement = used
	return res, nil
}
