package proxy

import (
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
)

// answerRecord saves a Responses answer into the record of the history it
// continues (responses_record.go), so that the next request, which names
// this response, is judged with it. It is active only for a request with a
// record plan.
type answerRecord struct {
	pipeline *pipeline
	plan     *plan
	answer   *responsesStream
	// id and output are a non-streamed answer's id and output items.
	id, output string
	// saved: the record was saved when the stream completed.
	saved bool
}

// start activates r for pl's record, if it has one and a is a Responses
// answer, the one API whose histories the upstream keeps.
func (r *answerRecord) start(p *pipeline, pl *plan, a answer) {
	if ra, ok := a.(*responsesStream); ok && pl.record != nil {
		r.pipeline, r.plan, r.answer = p, pl, ra
	}
}

// active reports whether the answer is recorded.
func (r *answerRecord) active() bool { return r.plan != nil }

// completes reports whether ev completes the recorded answer.
func (r *answerRecord) completes(ev *sse.Event) bool {
	return r.plan != nil && string(ev.Name) == "response.completed"
}

// save records the streamed answer; the observer calls it with the
// completing event read, before the agent sees its end: the agent's next
// request may name this response at once.
func (r *answerRecord) save() {
	r.pipeline.saveRecord(r.plan, r.answer.acc.ID(), gjson.ParseBytes(r.answer.acc.AppendOutput(nil)))
	r.saved = true
}

// body keeps the id and output of a non-streamed answer as the agent got
// it: b, or cut when not nil.
func (r *answerRecord) body(b, cut []byte) {
	if r.plan == nil {
		return
	}
	if cut != nil {
		b = cut
	}
	res := gjson.GetManyBytes(b, "id", "output")
	r.id, r.output = res[0].String(), res[1].Raw
}

// finish saves an answer that the stream's completion did not: a
// non-streamed one, or a stream that ended otherwise.
func (r *answerRecord) finish() {
	if r.plan == nil || r.saved {
		return
	}
	if r.id != "" {
		r.pipeline.saveRecord(r.plan, r.id, gjson.Parse(r.output))
	} else if id := r.answer.acc.ID(); id != "" {
		r.pipeline.saveRecord(r.plan, id, gjson.ParseBytes(r.answer.acc.AppendOutput(nil)))
	}
}
