package proxy

import (
	"context"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/observe"
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
	return p.prepareRecordOn(ctx, body, false)
}

// prepareSocketRecord is prepareRecord for a turn on a Responses
// WebSocket: the upstream keeps the socket's responses in the connection
// even with store false, and the next turn names them by
// previous_response_id with only its new items, however long the first
// input was. Every turn is recorded.
func (p *pipeline) prepareSocketRecord(ctx context.Context, body []byte) (judged []byte, rec *recordPlan, failed bool) {
	return p.prepareRecordOn(ctx, body, true)
}

func (p *pipeline) prepareRecordOn(ctx context.Context, body []byte, socket bool) (judged []byte, rec *recordPlan, failed bool) {
	m := recordMembersOf(body)
	conv := m.conversation
	if conv.IsObject() {
		conv = conv.Get("id")
	}
	continues := m.previous.String() != "" || conv.String() != ""
	if !socket && m.store.Type == gjson.False && conv.String() == "" {
		return body, nil, false
	}
	if !socket && !continues && moreItemsThan(m.input, maxChainStart) {
		return body, nil, false
	}
	items := inputItems(m.input)
	rp := &recordPlan{input: items, conv: conv.String()}
	if !continues {
		return body, rp, false
	}
	chain, err := p.policy.Record(ctx, policy.RecordKey(m.previous.String(), rp.conv))
	if err != nil {
		p.failOpen(nil, observe.StageStore, err)
		return body, rp, true
	}
	rp.chain = chain
	if len(chain) == 0 {
		return body, rp, false
	}
	// The body to judge: the request with the recorded items before its input.
	b := make([]byte, 0, len(body)+64*len(chain))
	b = append(b, `{"model":`...)
	b = append(b, rawOr(m.model, `""`)...)
	b = append(b, `,"instructions":`...)
	b = append(b, rawOr(m.instructions, `""`)...)
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
// recordMembers are the members of a Responses request that its record
// depends on.
type recordMembers struct {
	previous, conversation, input, store, model, instructions gjson.Result
}

// recordMembersOf reads them in one pass over the body (rawjson.Members
// skips the input several times faster than a gjson Get per member would,
// each scanning it again); the first of duplicate members counts, as with
// gjson.Get.
func recordMembersOf(body []byte) (m recordMembers) {
	rawjson.Members(rawjson.View(body), func(k, v string) bool {
		var r *gjson.Result
		switch k {
		case "previous_response_id":
			r = &m.previous
		case "conversation":
			r = &m.conversation
		case "input":
			r = &m.input
		case "store":
			r = &m.store
		case "model":
			r = &m.model
		case "instructions":
			r = &m.instructions
		default:
			return true
		}
		if !r.Exists() {
			*r = gjson.Parse(v)
		}
		return true
	})
	return m
}

// moreItemsThan reports whether the input holds more than n items, reading
// no further than item n+1: a request that resends its whole history need
// not have it split.
func moreItemsThan(input gjson.Result, n int) bool {
	if input.Type == gjson.String {
		return n < 1
	}
	count := 0
	input.ForEach(func(_, _ gjson.Result) bool {
		count++
		return count <= n
	})
	return count > n
}

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
		p.failOpen(nil, observe.StageStore, err)
	}
}
