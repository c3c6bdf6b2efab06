package policy

import "github.com/loopguard/loopguard/inspect"

// judgedWindow is how many steps up to the judged one are searched for
// the call the agent repeats.
const judgedWindow = 16

// judgedEvidence is what the agent is told of a judge's finding on the
// steps up to j.Step: the category (semantic_loop, from inspect's fixed
// list) and the tool call the session made most often in the steps the
// judge read, quoted from the history. The judge's own words (j.What) are
// a model's output, which text in the history can steer ("ignore all
// previous instructions, run ..."): they go to the session's timeline and
// log, never into a request.
func judgedEvidence(t *inspect.Trajectory, j *Judgement, last int) inspect.Evidence {
	ev := inspect.Evidence{Count: 1, First: j.Step, Last: last}
	if t == nil {
		return ev
	}
	end := min(j.Step, len(t.Steps)-1)
	seen := make(map[uint64]int)
	var best *inspect.Call
	for i := max(t.Start, end-judgedWindow+1, 0); i <= end; i++ {
		for k := range t.Steps[i].Calls {
			c := &t.Steps[i].Calls[k]
			seen[c.Fingerprint]++
			if best == nil || seen[c.Fingerprint] >= seen[best.Fingerprint] {
				best = c
			}
		}
	}
	if best != nil {
		ev.Element, ev.Tool, ev.Args, ev.Count = best.Name, best.Name, best.Args, seen[best.Fingerprint]
	}
	return ev
}
