package observe

import (
	"sort"
	"time"

	"github.com/loopguard/loopguard/inspect"
)

// Per-minute detection counts and their query (Stats).

// BucketSize is the width of one stats bucket.
const BucketSize = time.Minute

// maxStatKeys bounds the distinct (model, category) pairs of one bucket:
// model names come from clients, and beyond this they share "other".
const maxStatKeys = 256

type statKey struct {
	model    string
	category int
}

// Counts are one stats bucket's counters.
type Counts struct {
	Requests      int `json:"requests"`
	Detections    int `json:"detections"`
	Interventions int `json:"interventions"`
	Terminations  int `json:"terminations"`
	Cuts          int `json:"cuts"`
	TokensSaved   int `json:"tokens_saved"`
}

func (c *Counts) add(o Counts) {
	c.Requests += o.Requests
	c.Detections += o.Detections
	c.Interventions += o.Interventions
	c.Terminations += o.Terminations
	c.Cuts += o.Cuts
	c.TokensSaved += o.TokensSaved
}

type bucket struct {
	minute int64
	counts map[statKey]Counts
}

// count adds c to the stats bucket of now for (model, category). r.mu is held.
func (r *Recorder) count(now time.Time, model string, cat int, c Counts) {
	minute := now.Unix() / int64(BucketSize/time.Second)
	b := &r.buckets[minute%int64(len(r.buckets))]
	if b.minute > minute {
		return // an entry older than the buckets kept (another replica's backlog)
	}
	if b.minute != minute || b.counts == nil {
		if b.counts == nil {
			b.counts = make(map[statKey]Counts)
		}
		clear(b.counts)
		b.minute = minute
	}
	k := statKey{model, cat}
	old, ok := b.counts[k]
	if !ok && len(b.counts) >= maxStatKeys {
		k.model = "other"
		old = b.counts[k]
	}
	old.add(c)
	b.counts[k] = old
}

// Recovery is the outcome count of interventions at one category and level.
type Recovery struct {
	Category    inspect.Category `json:"category"`
	Level       int              `json:"level"`
	Recovered   int              `json:"recovered"`
	LoopedAgain int              `json:"looped_again"`
	// Rate is Recovered / (Recovered + LoopedAgain).
	Rate float64 `json:"rate"`
}

// Bucket is one time bucket of Stats.
type Bucket struct {
	Start time.Time `json:"start"`
	Counts
	// Detections and cuts by category.
	DetectionsBy map[inspect.Category]int `json:"detections_by,omitempty"`
	CutsBy       map[inspect.Category]int `json:"cuts_by,omitempty"`
}

// Stats is the answer of Stats: series for charts, oldest bucket first.
type Stats struct {
	BucketSeconds int        `json:"bucket_seconds"`
	Buckets       []Bucket   `json:"buckets"`
	Totals        Counts     `json:"totals"`
	Recovery      []Recovery `json:"recovery"`
	// Models and Categories are every value seen in the buckets, for filters.
	Models     []string           `json:"models"`
	Categories []inspect.Category `json:"categories"`
}

// Stats returns the last hour's buckets (Options.Buckets minutes up to now)
// restricted to f's model and category, and recovery counts (all time) for
// f's category.
func (r *Recorder) Stats(f Filter, now time.Time) Stats {
	n := len(r.buckets)
	st := Stats{BucketSeconds: int(BucketSize / time.Second), Buckets: make([]Bucket, n), Recovery: []Recovery{}}
	cur := now.Unix() / int64(BucketSize/time.Second)
	models := map[string]bool{}
	cats := map[inspect.Category]bool{}
	fcat := -1
	if f.Category != "" {
		fcat = categoryIndex(f.Category)
	}
	r.mu.Lock()
	for i := range st.Buckets {
		minute := cur - int64(n-1-i)
		out := &st.Buckets[i]
		out.Start = time.Unix(minute*int64(BucketSize/time.Second), 0).UTC()
		b := &r.buckets[((minute%int64(n))+int64(n))%int64(n)]
		if b.minute != minute {
			continue
		}
		for k, c := range b.counts {
			models[k.model] = true
			if k.category != catNone {
				cats[categories[k.category]] = true
			}
			if f.Model != "" && k.model != f.Model {
				continue
			}
			if fcat >= 0 && k.category != fcat {
				// Requests carry no category: keep them so rates stay readable.
				out.Requests += c.Requests
				continue
			}
			out.add(c)
			if k.category == catNone {
				continue
			}
			if c.Detections > 0 {
				if out.DetectionsBy == nil {
					out.DetectionsBy = map[inspect.Category]int{}
				}
				out.DetectionsBy[categories[k.category]] += c.Detections
			}
			if c.Cuts > 0 {
				if out.CutsBy == nil {
					out.CutsBy = map[inspect.Category]int{}
				}
				out.CutsBy[categories[k.category]] += c.Cuts
			}
		}
		st.Totals.add(out.Counts)
	}
	for k, c := range r.recovery {
		if fcat >= 0 && k.category != fcat {
			continue
		}
		rec := Recovery{Category: categories[k.category], Level: k.level, Recovered: c[0], LoopedAgain: c[1]}
		if t := c[0] + c[1]; t > 0 {
			rec.Rate = float64(c[0]) / float64(t)
		}
		st.Recovery = append(st.Recovery, rec)
	}
	r.mu.Unlock()
	sort.Slice(st.Recovery, func(i, j int) bool {
		a, b := st.Recovery[i], st.Recovery[j]
		if a.Category != b.Category {
			return a.Category < b.Category
		}
		return a.Level < b.Level
	})
	st.Models = make([]string, 0, len(models))
	for m := range models {
		if m != "" {
			st.Models = append(st.Models, m)
		}
	}
	sort.Strings(st.Models)
	st.Categories = make([]inspect.Category, 0, len(cats))
	for c := range cats {
		st.Categories = append(st.Categories, c)
	}
	sort.Slice(st.Categories, func(i, j int) bool { return st.Categories[i] < st.Categories[j] })
	return st
}
