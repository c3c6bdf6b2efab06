package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/loopguard/loopguard/ndjson"
	"github.com/loopguard/loopguard/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// ollamaAPI is Ollama's own chat API (POST /api/chat), which its official
// libraries and many local clients speak: every request carries the whole
// history, as chat completions' does, in the same message shape, so the
// warnings and recovery blocks go where chat's go. It streams NDJSON lines
// unless the request says "stream": false.
var ollamaAPI = register(&wireAPI{
	name:      wireapi.Ollama,
	apply:     (*inject.Injector).ApplyOllama,
	terminate: (*inject.Injector).TerminateOllama,
	newAnswer: newOllamaAnswer,
	holdEvent: (*callHolder).itemEvent,
	cutBody:   cutOllamaBody,
	textPath:  "message.content",
	readFirst: opensCalls,
})

// ollamaGenerateAPI is Ollama's POST /api/generate: a prompt, no history,
// so there is nothing to judge but the answer, whose degenerate streams
// are cut as chat's are.
var ollamaGenerateAPI = register(&wireAPI{
	name:      wireapi.OllamaGenerate,
	apply:     keepBody,
	terminate: (*inject.Injector).TerminateOllamaGenerate,
	newAnswer: newOllamaAnswer,
	holdEvent: (*callHolder).itemEvent,
	cutBody:   cutOllamaBody,
	textPath:  "response",
	readFirst: opensCalls,
})

// keepBody is apply for an API whose requests have no history to write
// into: the body goes as it came.
func keepBody(_ *inject.Injector, body []byte, _ inject.Edit) (inject.Result, error) {
	return inject.Result{Body: body}, nil
}

// ollamaStream is a streamed Ollama answer: NDJSON lines, each tool call
// whole in one line, the last line "done": true with the counts.
type ollamaStream struct {
	acc ndjson.Ollama
	ups []sse.Update // what the last add returned
}

var ollamaStreams = sync.Pool{New: func() any { return new(ollamaStream) }}

func newOllamaAnswer() answer { return ollamaStreams.Get().(*ollamaStream) }

// add: a call arrives whole, so it starts and completes in one line; a
// line with several calls returns one update a call, so that each is
// compared with those before it.
func (a *ollamaStream) add(data []byte) ([]sse.Update, error) {
	u, err := a.acc.Add(data)
	if err != nil {
		return nil, err
	}
	au := sse.Update{Text: u.Text, Reasoning: u.Reasoning, ToolCallStarted: -1, ToolCallDone: -1}
	a.ups = a.ups[:0]
	for k := 0; k < max(u.Calls, 1); k++ {
		if u.Calls > 0 {
			au.ToolCall = true
			au.ToolCallStarted, au.ToolCallDone = u.CallStarted+k, u.CallStarted+k
		}
		a.ups = append(a.ups, au)
		au.Text, au.Reasoning = nil, nil
	}
	return a.ups, nil
}

func (a *ollamaStream) toolCall(pos int) (name, args []byte, ok bool) { return a.acc.ToolCall(pos) }

func (a *ollamaStream) usage() sse.Usage {
	u, _ := a.acc.Usage()
	return u
}

// appendEnd ends a cut stream with Ollama's final line: "done": true,
// done_reason "loopguard_cut", and what was cut (category, offset) beside
// it, so that a client reading NDJSON ends as after any answer; or with
// e's replacement (appendReplacement).
func (a *ollamaStream) appendEnd(b []byte, e *ending, _ *sse.Event) ([]byte, bool) {
	if e.replacement != "" {
		return a.appendReplacement(b, e), true
	}
	b = a.appendHead(b, e.model)
	if a.acc.Generate() {
		b = append(b, `,"response":""`...)
	} else {
		b = append(b, `,"message":{"role":"assistant","content":""}`...)
	}
	b = append(b, `,"done":true,"done_reason":"loopguard_cut","loopguard_cut":{"category":`...)
	b = rawjson.AppendQuote(b, string(e.cut.Category))
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, e.offset, 10)
	b = append(b, `},"eval_count":`...)
	b = strconv.AppendInt(b, int64(estimateTokens(e.bytes)), 10)
	return append(b, "}\n"...), true
}

// appendReplacement ends the stream with e's replacement, the
// LOOP_DETECTED answer, in place of a held tool call.
func (a *ollamaStream) appendReplacement(b []byte, e *ending) []byte {
	model, at := e.model, time.Now().UTC().Format(time.RFC3339Nano)
	if m := a.acc.Model(); len(m) > 0 {
		model = string(m)
	}
	b = inject.AppendOllamaLine(b, model, at, e.replacement, "")
	return inject.AppendOllamaLine(b, model, at, "", "stop")
}

// appendHead opens a line with the stream's model and a created_at.
func (a *ollamaStream) appendHead(b []byte, model string) []byte {
	b = append(b, `{"model":`...)
	if m := a.acc.Model(); len(m) > 0 {
		b = rawjson.AppendQuote(b, string(m))
	} else {
		b = rawjson.AppendQuote(b, model)
	}
	b = append(b, `,"created_at":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func (a *ollamaStream) release() {
	a.acc.Reset()
	a.ups = a.ups[:0]
	ollamaStreams.Put(a)
}

// cutOllamaBody cuts a degenerate non-streamed Ollama answer
// (message.content, or /api/generate's response) where its repetition
// began, with done_reason "loopguard_cut".
func cutOllamaBody(w *cutWatch, b []byte, _ string) []byte {
	path := "message.content"
	t := gjson.GetBytes(b, path)
	if !t.Exists() {
		path = "response"
		t = gjson.GetBytes(b, path)
	}
	if t.Type != gjson.String {
		return nil
	}
	s := t.String()
	d := w.textDetector(0)
	w.bytes += int64(len(s))
	if !d.Write([]byte(s)) {
		return nil
	}
	off := min(max(d.Offset(), 0), int64(len(s)))
	w.cutAt(d.Detection(), off)
	out, err := sjson.SetBytes(b, path, s[:off])
	if err != nil {
		return nil
	}
	if out, err = sjson.SetBytes(out, "done_reason", "loopguard_cut"); err != nil {
		return nil
	}
	return out
}

var _ answer = (*ollamaStream)(nil)
