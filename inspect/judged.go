package inspect

import "slices"

// WithDetection returns v with d added and aggregated again under the
// thresholds of model, as if a detector had found d: a finding made outside
// Inspect (the optional judge's semantic_loop) then warns, constrains or
// does nothing by the same rules as every rule's. A category model's
// overrides disable is left out. v's detections are copied, never changed.
func (e *Engine) WithDetection(v Verdict, d Detection, model string) Verdict {
	if v.Err != nil || d.Score <= 0 {
		return v
	}
	lim := e.cfg.resolve(model)
	if !lim.enabled(d.Category) {
		return v
	}
	d.Score = clamp01(d.Score)
	dets := append(slices.Clip(v.Detections), d)
	return aggregate(dets, &lim)
}
