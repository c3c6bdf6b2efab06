package inject

import (
	"errors"
	"github.com/loopguard/loopguard/internal/rawjson"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// ApplyAnthropic is Apply for an Anthropic Messages body (POST
// /v1/messages): first the collapses the edit asks for (see
// CollapseAnthropic), then one insertion of the edit's texts at the
// placement configured for the request's model (see InsertAnthropic). On
// error the caller sends the original body (fail open); body is not
// modified.
func (in *Injector) ApplyAnthropic(body []byte, e Edit) (Result, error) {
	return in.applyTexts(body, e, in.CollapseAnthropic, InsertAnthropic)
}

// InsertAnthropic adds text to an Anthropic Messages body and returns the
// new body and the placement used:
//
//   - Tool adds a text block to the last user message that carries
//     tool_result blocks, after them (the API wants tool results first in
//     their turn); without one it falls back to User;
//   - User appends to a trailing user message (a string content after a
//     blank line, a block array as a text block), else adds a user message;
//   - System appends to "system" (a string after a blank line, an array of
//     blocks as a text block), adding it when absent: Anthropic has no
//     system role inside messages;
//   - Auto is Tool when the last message is a user turn of tool results,
//     else User.
//
// Only the insertion point changes; every other byte is kept.
func InsertAnthropic(body []byte, p Placement, text string) ([]byte, Placement, error) {
	b := rawjson.View(body)
	if !rawjson.Valid(body) || !gjson.Parse(b).IsObject() {
		return nil, "", ErrMalformed
	}
	if p == System {
		sys := gjson.Get(b, "system")
		if sys.IsArray() && sys.Index > 0 {
			at := sys.Index + len(sys.Raw) - 1
			ins := make([]byte, 0, len(text)+32)
			if hasMembers(sys.Raw) {
				ins = append(ins, ',')
			}
			ins = append(ins, `{"type":"text","text":`...)
			ins = rawjson.AppendQuote(ins, text)
			return splice{start: at, end: at, ins: append(ins, '}')}.apply(body), System, nil
		}
		return insertField(body, "system", text), System, nil
	}
	msgs := gjson.Get(b, "messages")
	if !msgs.IsArray() || msgs.Index <= 0 {
		return nil, "", ErrNoMessages
	}
	var last, lastResults gjson.Result
	n := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		n++
		last = m
		if m.Get("role").String() == "user" && hasToolResult(m.Get("content")) {
			lastResults = m
		}
		return true
	})
	switch p {
	case Tool, Auto, "":
		if lastResults.Exists() && (p == Tool || last.Index == lastResults.Index) {
			if sp, ok := appendMember(body, lastResults.Index, lastResults, "content", "text", text); ok {
				return sp.apply(body), Tool, nil
			}
		}
	case User:
	default:
		return nil, "", errors.New("inject: unknown placement " + string(p))
	}
	if n > 0 && last.Get("role").String() == "user" {
		if sp, ok := appendMember(body, last.Index, last, "content", "text", text); ok {
			return sp.apply(body), User, nil
		}
	}
	msg := append([]byte(`{"role":"user","content":[{"type":"text","text":`), rawjson.AppendQuote(nil, text)...)
	msg = append(msg, "}]}"...)
	at := msgs.Index + len(msgs.Raw) - 1
	if n > 0 {
		msg = append([]byte{','}, msg...)
	}
	return splice{start: at, end: at, ins: msg}.apply(body), User, nil
}

func hasToolResult(content gjson.Result) bool {
	found := false
	content.ForEach(func(_, b gjson.Result) bool {
		found = b.Get("type").String() == "tool_result"
		return !found
	})
	return found
}

// Anthropic error types: loopguard's own for the error form.
const anthropicLoopErrorType = "loop_detected"

// TerminateAnthropic is Terminate for an Anthropic Messages request: HTTP
// 200 with a message (one text block starting with LOOP_DETECTED:,
// stop_reason "end_turn"), or for a streaming request its events
// (message_start, content_block_start, content_block_delta,
// content_block_stop, message_delta, message_stop). With terminate_as =
// "error" it is an Anthropic-shaped error {"type":"error","error":{"type":
// "loop_detected","message":...}} with Config.ErrorStatus and
// x-should-retry: false, which the Anthropic SDKs do not retry.
func (in *Injector) TerminateAnthropic(body []byte, l Loop) (Response, error) {
	content, err := in.TerminateText(l)
	if err != nil {
		return Response{}, err
	}
	if in.cfg.TerminateAs == AsError {
		typ := anthropicLoopErrorType
		if l.Budget != nil {
			typ = BudgetErrorType
		}
		b := append([]byte(`{"type":"error","error":{"type":"`+typ+`","message":`), rawjson.AppendQuote(nil, content)...)
		return in.errorAnswer(append(b, "}}"...)), nil
	}
	req := gjson.GetMany(rawjson.View(body), "model", "stream")
	id, model := in.hexID("msg_loopguard_"), req[0].String()
	if model == "" {
		model = "loopguard"
	}
	if !req[1].Bool() {
		b := appendAnthropicHead(nil, id, model)
		b = append(b, `{"type":"text","text":`...)
		b = rawjson.AppendQuote(b, content)
		b = append(b, `}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`...)
		return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", contentJSON}}, Body: b}, nil
	}
	b := append([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":"), appendAnthropicHead(nil, id, model)...)
	b = append(b, `],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`+"\n\n"...)
	b = appendAnthropicText(b, 0, content)
	b = appendAnthropicEnd(b, 0, true, "end_turn", 0)
	return Response{
		Status: http.StatusOK,
		Header: []Header{{"Content-Type", contentSSE}, {"Cache-Control", "no-cache"}},
		Body:   b,
	}, nil
}

// appendAnthropicHead appends a message object up to its open content array.
func appendAnthropicHead(b []byte, id, model string) []byte {
	b = append(b, `{"id":`...)
	b = rawjson.AppendQuote(b, id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = rawjson.AppendQuote(b, model)
	return append(b, `,"content":[`...)
}

// appendAnthropicText appends content_block_start of a text block at
// index and one content_block_delta with text; the block is left open.
func appendAnthropicText(b []byte, index int, text string) []byte {
	b = append(b, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, ",\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"...)
	b = append(b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, ",\"delta\":{\"type\":\"text_delta\",\"text\":"...)
	b = rawjson.AppendQuote(b, text)
	return append(b, "}}\n\n"...)
}

// appendAnthropicEnd appends content_block_stop for an open block (when
// open), message_delta and message_stop.
func appendAnthropicEnd(b []byte, block int, open bool, stop string, outputTokens int) []byte {
	if open {
		b = append(b, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"...)
		b = strconv.AppendInt(b, int64(block), 10)
		b = append(b, "}\n\n"...)
	}
	b = append(b, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"...)
	b = rawjson.AppendQuote(b, stop)
	b = append(b, `,"stop_sequence":null},"usage":{"output_tokens":`...)
	b = strconv.AppendInt(b, int64(outputTokens), 10)
	b = append(b, "}}\n\n"...)
	return append(b, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}

// AnthropicCut is what the tail of a cut Anthropic stream needs to know;
// the proxy fills it from sse.AnthropicAccumulator.
type AnthropicCut struct {
	// Category names the rule that cut, for the SSE comment.
	Category string
	// OpenBlock is the index of the content block still open
	// (OpenBlock()); HasOpen is false when none is.
	OpenBlock int
	HasOpen   bool
	// StopReason is message_delta's stop_reason: "end_turn" when empty.
	// "tool_use" makes the agent run the tool_use blocks already forwarded.
	StopReason string
	// OutputTokens is the output token count to report (an estimate).
	OutputTokens int
	// Answer, when not empty, is a text block loopguard adds at block
	// AnswerIndex (the LOOP_DETECTED answer in place of a held tool_use
	// block); no block may be open then.
	Answer      string
	AnswerIndex int
}

// AppendAnthropicCut appends the events that end a cut Anthropic stream
// well-formed: a comment ": loopguard cut category=...", the answer block if
// any, content_block_stop for the open block, message_delta with the stop
// reason, message_stop.
// The proxy then closes the upstream connection.
func AppendAnthropicCut(dst []byte, c AnthropicCut) []byte {
	dst = append(dst, ": loopguard cut category="...)
	dst = append(dst, strings.TrimSpace(c.Category)...)
	dst = append(dst, "\n\n"...)
	stop := c.StopReason
	if stop == "" {
		stop = "end_turn"
	}
	if c.Answer != "" {
		dst = appendAnthropicText(dst, c.AnswerIndex, c.Answer)
		c.OpenBlock, c.HasOpen = c.AnswerIndex, true
	}
	return appendAnthropicEnd(dst, c.OpenBlock, c.HasOpen, stop, c.OutputTokens)
}
