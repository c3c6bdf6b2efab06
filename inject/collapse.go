package inject

import (
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Collapsed reports what a collapse did.
type Collapsed struct {
	// Turns is the number of repeating assistant turns removed.
	Turns int
	// Messages is the number of messages removed (the turns and their
	// results; Responses: input items).
	Messages int
	// Saved is the number of body bytes saved.
	Saved int
}

// histMsg is one unit of the history as collapse needs it: a chat or
// Anthropic message, or the run of Responses input items of one turn.
type histMsg struct {
	raw     string   // its bytes in the body, several items with their commas for a Responses turn
	role    string   // "assistant" (a turn that may call tools), "tool" (only results), "user", or another
	answers []string // the call ids a "tool" unit answers
	ids     []string // the call ids an assistant turn makes
	legacy  bool     // an assistant message with a legacy function_call
	user    bool     // a user turn, for the alternation strict templates demand
	items   int      // the array elements it spans
}

// history is a request's history in the units a collapse removes.
type history struct {
	key  string // the body's member holding the array
	size int    // the array's length in bytes
	msgs []histMsg
	// unit maps a CallRef.Message (an index into the array) to its unit;
	// nil when units and array elements are the same.
	unit map[int]int
	// note returns the splice that appends text to a kept result's raw.
	note func(raw, text string) (splice, bool)
}

// callKey identifies a repeated call independent of its id: the same tool
// with the same canonical arguments.
type callKey struct{ name, args string }

// Collapse replaces the looping span of a chat history by its first
// instance plus a note (the reset action). calls are the loop's calls from
// the verdict's evidence, with message indices into request.messages.
//
// An assistant turn is removed, together with every tool result answering it,
// only when every call it makes is one of calls and each of those calls (tool
// and canonical arguments) already occurred in an earlier kept turn; so every
// tool_call_id left in the history stays paired, and a cycle (A, B, A, B)
// keeps its first A and its first B. A turn is also kept when removing it
// would put two user messages next to each other. The kept result of each
// repeated call gets a note saying how often it was repeated.
//
// Kept messages are copied byte for byte from body; the new array is set
// with sjson. References that do not match the body (a message that is not an
// assistant turn, an id it does not carry) are ignored. When nothing can be
// removed, the original body is returned with a zero Collapsed.
func (in *Injector) Collapse(body []byte, calls []inspect.CallRef) ([]byte, Collapsed, error) {
	arr := gjson.Get(rawjson.View(body), "messages")
	if !arr.IsArray() {
		return body, Collapsed{}, ErrNoMessages
	}
	if len(calls) == 0 {
		return body, Collapsed{}, nil
	}
	h := history{key: "messages", size: len(arr.Raw), note: func(raw, text string) (splice, bool) { return appendContent(message{raw: raw}, text) }}
	var answers []string // every tool message's answers, one allocation for all
	arr.ForEach(func(_, v gjson.Result) bool {
		m := histMsg{raw: v.Raw, role: v.Get("role").String(), items: 1}
		switch m.role {
		case "assistant":
			v.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
				m.ids = append(m.ids, tc.Get("id").String())
				return true
			})
			m.legacy = len(m.ids) == 0 && v.Get("function_call").IsObject()
		case "tool":
			answers = append(answers, v.Get("tool_call_id").String())
			m.answers = answers[len(answers)-1 : len(answers) : len(answers)]
		case "user":
			m.user = true
		}
		h.msgs = append(h.msgs, m)
		return true
	})
	return in.collapse(body, h, calls)
}

// collapse is Collapse over a history of any API.
func (in *Injector) collapse(body []byte, h history, calls []inspect.CallRef) ([]byte, Collapsed, error) {
	msgs := h.msgs
	// The loop's calls, by message and tool_call_id ("" for a legacy
	// function_call). Ids are keyed with their message because some servers
	// reuse ids such as "call_0" in every turn.
	type ref struct {
		msg int
		id  string
	}
	loop := make(map[ref]callKey, len(calls))
	for _, c := range calls {
		i := c.Message
		if h.unit != nil {
			var ok bool
			if i, ok = h.unit[c.Message]; !ok {
				continue
			}
		}
		if i < 0 || i >= len(msgs) || msgs[i].role != "assistant" {
			continue
		}
		m := msgs[i]
		if (c.ToolCallID == "" && m.legacy) || (c.ToolCallID != "" && contains(m.ids, c.ToolCallID)) {
			loop[ref{i, c.ToolCallID}] = callKey{c.Name, c.Args}
		}
	}

	// results finds the messages answering the turn at i: the tool messages
	// with its ids up to the next assistant turn, or for a legacy call the
	// function message right after it. It reports false when a call has no
	// result there, or a result message also answers a call of another
	// turn, and then the turn is never removed: removing it could leave a
	// result somewhere else unpaired.
	results := func(i int) ([]int, bool) {
		m := msgs[i]
		if m.legacy {
			if i+1 < len(msgs) && msgs[i+1].role == "function" {
				return []int{i + 1}, true
			}
			return nil, false
		}
		res := make([]int, len(m.ids))
		for j := range res {
			res[j] = -1
		}
		for j := i + 1; j < len(msgs) && msgs[j].role != "assistant"; j++ {
			if msgs[j].role != "tool" {
				continue
			}
			answersTurn := false
			for x, id := range m.ids {
				if res[x] < 0 && contains(msgs[j].answers, id) {
					res[x] = j
					answersTurn = true
				}
			}
			if answersTurn && !subset(msgs[j].answers, m.ids) {
				return res, false
			}
		}
		for _, r := range res {
			if r < 0 {
				return res, false
			}
		}
		return res, true
	}

	drop := make([]bool, len(msgs))
	seen := make(map[callKey]int)    // call -> message of its kept result
	count := make(map[callKey]int)   // call -> occurrences in loop turns
	removed := make(map[callKey]int) // call -> occurrences removed
	turns := 0
	for i, m := range msgs {
		if m.role != "assistant" || (len(m.ids) == 0 && !m.legacy) {
			continue
		}
		// keys of this turn's calls; the turn counts only when every call
		// is a loop call.
		var keys []callKey
		ok := true
		if m.legacy {
			k, in := loop[ref{i, ""}]
			ok = in
			keys = append(keys, k)
		} else {
			for _, id := range m.ids {
				k, in := loop[ref{i, id}]
				if !in {
					ok = false
				}
				keys = append(keys, k)
			}
		}
		// Every occurrence of a loop call counts towards the note, also in a
		// turn that stays because it made other calls too.
		for j, k := range keys {
			if m.legacy {
				count[k] += b2i(ok)
			} else if _, in := loop[ref{i, m.ids[j]}]; in {
				count[k]++
			}
		}
		if !ok {
			continue
		}
		res, paired := results(i)
		repeat := true
		for _, k := range keys {
			if _, kept := seen[k]; !kept {
				repeat = false
			}
		}
		if repeat && paired && !joinsUsers(msgs, drop, i, res) {
			drop[i] = true
			for _, r := range res {
				if r >= 0 {
					drop[r] = true
				}
			}
			for _, k := range keys {
				removed[k]++
			}
			turns++
			continue
		}
		for j, k := range keys {
			if _, kept := seen[k]; !kept {
				seen[k] = -1
				if j < len(res) {
					seen[k] = res[j]
				}
			}
		}
	}
	if turns == 0 {
		return body, Collapsed{}, nil
	}

	// Notes on the kept results of the calls that lost repeats.
	notes := make(map[int]string)
	for k, n := range removed {
		r := seen[k]
		if r < 0 {
			continue
		}
		note, err := in.collapseNote(count[k], n)
		if err != nil {
			return body, Collapsed{}, err
		}
		if prev, ok := notes[r]; ok {
			note = prev + "\n" + note
		}
		notes[r] = note
	}

	out := make([]byte, 0, h.size)
	out = append(out, '[')
	first := true
	n := 0
	for i, m := range msgs {
		if drop[i] {
			n += m.items
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		if note, ok := notes[i]; ok {
			if sp, ok := h.note(m.raw, note); ok {
				// A message at offset 0 of its own raw: splice directly.
				out = append(out, m.raw[:sp.start]...)
				out = append(out, sp.ins...)
				out = append(out, m.raw[sp.end:]...)
				continue
			}
		}
		out = append(out, m.raw...)
	}
	out = append(out, ']')
	nb, err := sjson.SetRawBytes(body, h.key, out)
	if err != nil {
		return body, Collapsed{}, err
	}
	return nb, Collapsed{Turns: turns, Messages: n, Saved: len(body) - len(nb)}, nil
}

// joinsUsers reports whether dropping the turn at i and its results would
// leave two user messages next to each other (strict templates demand
// alternation).
func joinsUsers(msgs []histMsg, drop []bool, i int, res []int) bool {
	gone := func(j int) bool {
		if j == i || drop[j] {
			return true
		}
		for _, r := range res {
			if r == j {
				return true
			}
		}
		return false
	}
	prev := i - 1
	for prev >= 0 && gone(prev) {
		prev--
	}
	next := i + 1
	for next < len(msgs) && gone(next) {
		next++
	}
	return prev >= 0 && next < len(msgs) && msgs[prev].user && msgs[next].user
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !contains(b, x) {
			return false
		}
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
