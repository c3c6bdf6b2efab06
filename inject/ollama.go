package inject

import (
	"net/http"
	"time"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/tidwall/gjson"
)

// ContentNDJSON is the content type of Ollama's streamed answers: one JSON
// object a line.
const ContentNDJSON = "application/x-ndjson"

// TerminateOllama answers an Ollama /api/chat request without calling the
// model. Ollama streams unless the request says "stream": false, so an
// absent stream member gets NDJSON lines: the LOOP_DETECTED message, then
// the final line with "done": true. A non-streamed request gets one object,
// {"model","created_at","message":{"role":"assistant","content":...},
// "done":true,"done_reason":"stop"}. With terminate_as = "error" it is
// Ollama's error shape, {"error": "LOOP_DETECTED: ..."}, with
// Config.ErrorStatus, as Ollama answers errors before a stream starts.
func (in *Injector) TerminateOllama(body []byte, l Loop) (Response, error) {
	content, err := in.TerminateText(l)
	if err != nil {
		return Response{}, err
	}
	if in.cfg.TerminateAs == AsError {
		b := append([]byte(`{"error":`), rawjson.AppendQuote(nil, content)...)
		return in.errorAnswer(append(b, '}')), nil
	}
	req := gjson.GetMany(rawjson.View(body), "model", "stream")
	model := req[0].String()
	if model == "" {
		model = "loopguard"
	}
	at := in.now().UTC().Format(time.RFC3339Nano)
	if req[1].Exists() && !req[1].Bool() {
		b := AppendOllamaLine(nil, model, at, content, "stop")
		return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", contentJSON}}, Body: b[:len(b)-1]}, nil
	}
	b := AppendOllamaLine(nil, model, at, content, "")
	b = AppendOllamaLine(b, model, at, "", "stop")
	return Response{Status: http.StatusOK, Header: []Header{{"Content-Type", ContentNDJSON}}, Body: b}, nil
}

// AppendOllamaLine appends one line of an Ollama chat answer, newline
// included: an assistant message with content, final ("done": true, with
// doneReason) when doneReason is not empty. The proxy ends a cut stream
// with such a final line.
func AppendOllamaLine(b []byte, model, createdAt, content, doneReason string) []byte {
	b = append(b, `{"model":`...)
	b = rawjson.AppendQuote(b, model)
	b = append(b, `,"created_at":`...)
	b = rawjson.AppendQuote(b, createdAt)
	b = append(b, `,"message":{"role":"assistant","content":`...)
	b = rawjson.AppendQuote(b, content)
	if doneReason == "" {
		return append(b, "},\"done\":false}\n"...)
	}
	b = append(b, `},"done":true,"done_reason":`...)
	b = rawjson.AppendQuote(b, doneReason)
	return append(b, "}\n"...)
}
