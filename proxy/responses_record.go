package proxy

import (
	"context"

	"github.com/loopguard/loopguard/policy"
	"github.com/tidwall/gjson"
)

// A Responses API request that continues a history kept by the upstream
// (previous_response_id, conversation) carries only its new input items, so
// the loop is not in the request. loopguard keeps a record of the items it
// saw go by (what the agent sent, what the model answered), keyed by the
// response or conversation the next request will name, and judges the
// record plus the request.

// recordPlan is what a Responses request needs to read and extend its record.
type recordPlan struct {
	chain []string // recorded items the request continues, oldest first
	input []string // the request's own input items, as the agent sent them
	conv  string   // the conversation id, "" if none
}

// maxChainStart is the most input items a request may carry and still be
// recorded without naming a history: the opening turn of a chain that the
// next request may continue by previous_response_id. Requests that resend
// their whole history need no record.
const maxChainStart = 4

// prepareRecord reads the record a Responses request continues and returns
// the body to judge: the recorded items followed by the request's input.
// body is returned as it is when the request neither continues nor may start
// a recorded history. rec is the request's record plan, nil if none; failed
// reports a store that failed (fail open: body is judged alone).
func (p *pipeline) prepareRecord(ctx context.Context, body []byte) (judged []byte, rec *recordPlan, failed bool) {
	prev := gjson.GetBytes(body, "previous_response_id").String()
	conv := gjson.GetBytes(body, "conversation")
	if conv.IsObject() {
		conv = conv.Get("id")
	}
	input := gjson.GetBytes(body, "input")
	items := inputItems(input)
	continues := prev != "" || conv.String() != ""
	if gjson.GetBytes(body, "store").Type == gjson.False && conv.String() == "" ||
		!continues && len(items) > maxChainStart {
		return body, nil, false
	}
	rp := &recordPlan{input: items, conv: conv.String()}
	if !continues {
		return body, rp, false
	}
	chain, err := p.policy.Record(ctx, policy.RecordKey(prev, rp.conv))
	if err != nil {
		p.failOpen(nil, "store", err)
		return body, rp, true
	}
	rp.chain = chain
	if len(chain) == 0 {
		return body, rp, false
	}
	// The body to judge: the request with the recorded items before its input.
	b := make([]byte, 0, len(body)+64*len(chain))
	b = append(b, `{"model":`...)
	b = append(b, rawOr(gjson.GetBytes(body, "model"), `""`)...)
	b = append(b, `,"instructions":`...)
	b = append(b, rawOr(gjson.GetBytes(body, "instructions"), `""`)...)
	b = append(b, `,"input":[`...)
	for i, it := range append(chain, items...) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, "]}"...), rp, false
}

func rawOr(r gjson.Result, def string) string {
	if r.Exists() {
		return r.Raw
	}
	return def
}

// inputItems returns a Responses input as raw items; a string input is one
// user message.
func inputItems(input gjson.Result) []string {
	if input.Type == gjson.String {
		return []string{`{"role":"user","content":` + input.Raw + `}`}
	}
	var items []string
	input.ForEach(func(_, it gjson.Result) bool {
		items = append(items, it.Raw)
		return true
	})
	return items
}

// saveRecord extends the record with the request's input and the answer's
// output items, under the key the next request of the history will name.
func (p *pipeline) saveRecord(pl *plan, responseID string, output gjson.Result) {
	rp := pl.record
	if rp == nil || responseID == "" && rp.conv == "" {
		return
	}
	items := append(append([]string(nil), rp.chain...), rp.input...)
	output.ForEach(func(_, it gjson.Result) bool {
		switch it.Get("type").String() {
		case "function_call", "custom_tool_call", "local_shell_call", "message":
			items = append(items, it.Raw)
		}
		return true
	})
	ctx, cancel := p.storeContext()
	defer cancel()
	if err := p.policy.SaveRecord(ctx, policy.RecordKey(responseID, rp.conv), items); err != nil {
		p.failOpen(nil, "store", err)
	}
}
