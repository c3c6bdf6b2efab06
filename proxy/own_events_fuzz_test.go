package proxy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/policy"
	"github.com/loopguard/loopguard/sse"
)

// FuzzOwnEventsAreJSON: every data line loopguard writes into a stream
// itself (the ending of a cut chat, Responses, Anthropic or Ollama stream, a held
// tool call replaced by LOOP_DETECTED, the LOOP_DETECTED answer of each
// API, the in-band error event) is one line of UTF-8 JSON, whatever ids,
// models, tool names, arguments and text the upstream or the history held.
// Go's strconv quoting writes \x1b and \xff, which JSON parsers reject.
func FuzzOwnEventsAreJSON(f *testing.F) {
	for _, s := range [][4]string{
		{"chatcmpl-1", "m", "bash", `{"command":"make build"}`},
		{"id\x1b[31m", "model\x00", "tool\x1b", "args \x1b[0m \xff\xfe"},
		{"\u2028", "\"quoted\" \\ model", "na\nme", "line\r\nbreak\ttab"},
		{"", "", "", ""},
		{"é漢字🙂", "\x7f", "\xc3", "\xed\xa0\x80"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	p := testPipeline(f)
	f.Fuzz(func(t *testing.T, id, model, name, text string) {
		q := func(s string) string { return string(rawjson.AppendQuote(nil, s)) }
		cut := &inspect.Detection{Category: inspect.TokenDegeneration, Score: 1}
		written := map[string][]byte{}

		// The upstream's strings reach loopguard's own events through the
		// accumulators: its stream is valid JSON, quoted correctly.
		o := newAnswerObserver(p, &plan{api: chatAPI, requestFacts: requestFacts{stream: true, usage: true, model: model}}, nil)
		chunk := `{"id":` + q(id) + `,"object":"chat.completion.chunk","created":1,"model":` + q(model) +
			`,"choices":[{"index":0,"delta":{"content":` + q(text) + `,"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":` + q(name) + `,"arguments":` + q(text) + `}}]}}]}`
		_ = o.read([]byte(chunk))
		o.watch.cut = cut
		written["chat cut"], _ = o.appendEnd(nil)
		o.watch.cut = nil
		written["held call replaced"] = o.holder.replace(o, nil, &terminalCall{constraint: policy.Constraint{
			Category: inspect.ToolRepetition, Brief: text, Tool: name, Args: text, Pattern: "p"}})
		o.release()

		// With tail = "trim" the event the repetition begins in is cut
		// short, anywhere in its text.
		o = newAnswerObserver(p, &plan{api: chatAPI, requestFacts: requestFacts{stream: true}}, nil)
		o.trimming = true
		raw := "data: " + chunk + "\n\n"
		out, _ := o.trimmer.event(o, &sse.Event{Raw: []byte(raw), Data: []byte(chunk)}, nil)
		if len(out) > 0 || len(o.trimmer.queue) != 1 {
			t.Fatalf("trim released %q with %d events held; want the event held", out, len(o.trimmer.queue))
		}
		for keep := 1; keep < len(text); keep++ {
			written["trimmed event"] = o.trimmer.appendTruncated(written["trimmed event"], &o.trimmer.queue[0], keep, o.plan.api.textPath, o.plan.api.framing)
		}
		o.release()

		o = newAnswerObserver(p, &plan{api: responsesAPI, requestFacts: requestFacts{stream: true}}, nil)
		for _, ev := range []string{
			`{"type":"response.created","sequence_number":0,"response":{"id":` + q(id) + `,"object":"response","created_at":1,"status":"in_progress","model":` + q(model) + `,"output":[]}}`,
			`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":` + q(id) + `,"type":"message","status":"in_progress","role":"assistant","content":[]}}`,
			`{"type":"response.output_text.delta","sequence_number":2,"item_id":` + q(id) + `,"output_index":0,"content_index":0,"delta":` + q(text) + `}`,
			`{"type":"response.output_item.done","sequence_number":3,"output_index":1,"item":{"id":"fc","type":"function_call","status":"completed","call_id":"c","name":` + q(name) + `,"arguments":` + q(text) + `}}`,
		} {
			_ = o.read([]byte(ev))
		}
		o.watch.cut = cut
		written["responses cut"], _ = o.appendEnd(nil)
		o.release()

		o = newAnswerObserver(p, &plan{api: anthropicAPI, requestFacts: requestFacts{stream: true}}, nil)
		for _, ev := range []string{
			`{"type":"message_start","message":{"id":` + q(id) + `,"type":"message","role":"assistant","content":[],"model":` + q(model) + `,"usage":{"input_tokens":1,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":` + q(name) + `,"input":{}}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":` + q(text) + `}}`,
		} {
			_ = o.read([]byte(ev))
		}
		o.watch.cut = cut
		written["anthropic cut"], _ = o.appendEnd(nil)
		o.release()

		loop := inject.Loop{Verdict: inspect.Verdict{Loop: true, Category: inspect.ToolRepetition, PatternKey: "p",
			Detections: []inspect.Detection{{Category: inspect.ToolRepetition, Score: 1,
				Evidence: inspect.Evidence{Element: text, Tool: name, Args: text, Count: 5, Threshold: 3}}}}}
		for api, body := range map[*wireAPI]string{
			chatAPI:      `{"model":` + q(model) + `,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			responsesAPI: `{"model":` + q(model) + `,"stream":true,"input":"hi"}`,
			anthropicAPI: `{"model":` + q(model) + `,"max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		} {
			ans, err := api.terminate(p.inject, []byte(body), loop)
			if err != nil {
				t.Fatalf("terminate %s: %v", api.name, err)
			}
			written["LOOP_DETECTED "+string(api.name)] = ans.Body
		}
		written["error event"] = sseErrorEvent(errors.New(text))

		// Ollama's streams are NDJSON: every line loopguard writes is JSON.
		lines := map[string][]byte{}
		o = newAnswerObserver(p, &plan{api: ollamaAPI, requestFacts: requestFacts{stream: true, model: model}}, nil)
		line := `{"model":` + q(model) + `,"created_at":` + q(id) + `,"message":{"role":"assistant","content":` + q(text) +
			`,"tool_calls":[{"function":{"name":` + q(name) + `,"arguments":{"a":` + q(text) + `}}}]},"done":false}`
		_ = o.read([]byte(line))
		o.watch.cut = cut
		lines["ollama cut"], _ = o.appendEnd(nil)
		o.watch.cut = nil
		lines["ollama held call replaced"] = o.holder.replace(o, nil, &terminalCall{constraint: policy.Constraint{
			Category: inspect.ToolRepetition, Brief: text, Tool: name, Args: text, Pattern: "p"}})
		o.release()
		o = newAnswerObserver(p, &plan{api: ollamaAPI, requestFacts: requestFacts{stream: true}}, nil)
		o.trimming = true
		if out, _ := o.trimmer.event(o, &sse.Event{Raw: []byte(line + "\n"), Data: []byte(line)}, nil); len(out) > 0 {
			t.Fatalf("trim released %q; want the line held", out)
		}
		for keep := 1; keep < len(text); keep++ {
			lines["ollama trimmed line"] = o.trimmer.appendTruncated(lines["ollama trimmed line"], &o.trimmer.queue[0], keep, o.plan.api.textPath, o.plan.api.framing)
		}
		o.release()
		for name, body := range map[string]string{
			"streamed":     `{"model":` + q(model) + `,"messages":[{"role":"user","content":"hi"}]}`,
			"not streamed": `{"model":` + q(model) + `,"stream":false,"messages":[{"role":"user","content":"hi"}]}`,
		} {
			for _, api := range []*wireAPI{ollamaAPI, ollamaGenerateAPI} {
				ans, err := api.terminate(p.inject, []byte(body), loop)
				if err != nil {
					t.Fatalf("terminate %s: %v", api.name, err)
				}
				lines["LOOP_DETECTED "+string(api.name)+" "+name] = ans.Body
			}
		}
		lines["error line"] = ndjsonErrorLine(errors.New(text))
		for what, b := range lines {
			if len(b) == 0 && what != "ollama trimmed line" {
				t.Errorf("%s: nothing written", what)
			}
			for _, l := range strings.Split(string(b), "\n") {
				if l != "" && (!json.Valid([]byte(l)) || !utf8.ValidString(l)) {
					t.Errorf("%s: line is not UTF-8 JSON: %q", what, l)
				}
			}
		}

		for what, b := range written {
			if len(b) == 0 && what != "trimmed event" {
				t.Errorf("%s: nothing written", what)
			}
			for _, line := range strings.Split(string(b), "\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				if !json.Valid([]byte(data)) || !utf8.ValidString(data) {
					t.Errorf("%s: data line is not one line of UTF-8 JSON: %q", what, data)
				}
			}
		}
	})
}
