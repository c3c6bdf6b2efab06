package proxy

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/rawjson"
	"github.com/loopguard/loopguard/observe"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// answerUsageRef and cutChatBodyRef are answerUsage and cutChatBody as they
// were, on gjson; the tests below hold the walkers to them.
func answerUsageRef(body []byte) observe.Usage {
	u := gjson.GetBytes(body, "usage")
	if !u.IsObject() {
		meta := gjson.GetBytes(body, "usageMetadata")
		if r := gjson.GetBytes(body, "response"); !meta.IsObject() && r.IsObject() {
			meta = r.Get("usageMetadata")
		}
		if meta.IsObject() {
			return observe.Usage{Input: int(meta.Get("promptTokenCount").Int()),
				Output: int(meta.Get("candidatesTokenCount").Int() + meta.Get("thoughtsTokenCount").Int())}
		}
		// Ollama's answers count at the top level.
		return observe.Usage{Input: int(gjson.GetBytes(body, "prompt_eval_count").Int()), Output: int(gjson.GetBytes(body, "eval_count").Int())}
	}
	in, out := u.Get("prompt_tokens"), u.Get("completion_tokens")
	if !in.Exists() && !out.Exists() {
		in, out = u.Get("input_tokens"), u.Get("output_tokens")
	}
	return observe.Usage{Input: int(in.Int()), Output: int(out.Int())}
}

func cutChatBodyRef(w *cutWatch, b []byte, finish string) []byte {
	out := b
	changed := false
	gjson.GetBytes(b, "choices").ForEach(func(i, ch gjson.Result) bool {
		text := ch.Get("message.content")
		if text.Type != gjson.String || i.Int() >= maxWatchedChoices {
			return true
		}
		d := w.textDetector(min(int(i.Int()), maxWatchedChoices-1))
		s := text.String()
		w.bytes += int64(len(s))
		if !d.Write([]byte(s)) {
			return true
		}
		det := d.Detection()
		off := d.Offset()
		if off < 0 || off > int64(len(s)) {
			off = int64(len(s))
		}
		w.cutAt(det, off)
		idx := strconv.FormatInt(i.Int(), 10)
		var err error
		if out, err = sjson.SetBytes(out, "choices."+idx+".message.content", s[:off]); err != nil {
			return false
		}
		if out, err = sjson.SetBytes(out, "choices."+idx+".finish_reason", finish); err != nil {
			return false
		}
		changed = true
		return true
	})
	if !changed {
		return nil
	}
	return out
}

// bodyReadCases are odd but valid chat answers.
var bodyReadCases = func() map[string]string {
	loop := strings.Repeat("I will check the config file again now. ", 14)
	escLoop := strings.Repeat(`I will check the \"config\" file\nagain. `, 14)
	return map[string]string{
		"plain":                `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`,
		"usage first":          `{"usage":{"completion_tokens":3,"prompt_tokens":12},"choices":[{"message":{"content":"Hi"}}]}`,
		"escaped content":      `{"choices":[{"message":{"content":"a \"quoted\" line\n\ttab \u00e9 \ud83d\ude00 \\ end"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		"content null":         `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"x","function":{"name":"f","arguments":"{}"}}]}}],"usage":{"prompt_tokens":5}}`,
		"content not a string": `{"choices":[{"message":{"content":[{"type":"text","text":"hi"}]}}]}`,
		"whitespace": " {\n \"choices\" : [ { \"message\" : { \"content\" : \"" + loop + "\" } , \"finish_reason\" : \"length\" } ] ,\n" +
			" \"usage\" : { \"prompt_tokens\" : 7 , \"completion_tokens\" : 9 } } ",
		"several choices": `{"choices":[{"index":0,"message":{"content":"fine"}},{"index":1,"message":{"content":"` + loop + `"},"finish_reason":"length"},` +
			`{"index":2,"message":{"content":"` + escLoop + `"}},{"message":{"content":"x"}},{"message":{"content":"` + loop + `"}}]}`,
		"escaped loop":        `{"choices":[{"message":{"content":"` + escLoop + `"}}]}`,
		"duplicate keys":      `{"choices":[{"message":{"content":"` + loop + `","content":"other"}}],"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens":2},"usage":{}}`,
		"escaped keys":        `{"cho\u0069ces":[{"m\u0065ssage":{"content":"` + loop + `"}}],"us\u0061ge":{"input_tokens":4,"output_tokens":6}}`,
		"responses usage":     `{"output":[],"usage":{"input_tokens":20,"output_tokens":5}}`,
		"usage mixed":         `{"usage":{"input_tokens":20,"completion_tokens":5}}`,
		"usage odd values":    `{"usage":{"prompt_tokens":"12","completion_tokens":3.9,"total_tokens":true}}`,
		"usage not an object": `{"usage":[1,2],"choices":{}}`,
		"message not object":  `{"choices":[1,"x",null,{"message":"text"},{"message":{"content":"` + loop + `"}}]}`,
		"empty":               `{}`,
		"gemini usage":        `{"candidates":[],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2,"thoughtsTokenCount":5,"totalTokenCount":16}}`,
		"code assist usage":   `{"response":{"candidates":[],"usageMetadata":{"candidatesTokenCount":2,"promptTokenCount":9}},"traceId":"t"}`,
		"gemini odd usage":    `{"usageMetadata":[1],"response":{"usageMetadata":{"promptTokenCount":"9","thoughtsTokenCount":1.5}},"response":{}}`,
		"array":               `[{"usage":{"prompt_tokens":1}}]`,
		"string":              `"usage"`,
		"empty choices":       `{"choices":[ ],"usage":{ }}`,
		"lone surrogates":     `{"choices":[{"message":{"content":"\ud800 x \udc00 y \ud83d"}}]}`,
	}
}()

// checkBodyRead holds answerUsage and cutChatBody to their references on
// one body: the same usage, the same output and the same cut.
func checkBodyRead(t *testing.T, name string, body []byte) {
	t.Helper()
	if !rawjson.Valid(body) {
		// The usage of a passive observer is read without validating the
		// answer first: whatever it is, the walk ends.
		answerUsage(body)
		return // the observer cuts only valid answers
	}
	if got, want := answerUsage(body), answerUsageRef(body); got != want {
		t.Errorf("%s: answerUsage = %+v; reference %+v", name, got, want)
	}
	cfg := DefaultConfig().Detect.Stream
	w, ref := cutWatch{cfg: &cfg}, cutWatch{cfg: &cfg}
	got := cutChatBody(&w, bytes.Clone(body), "length")
	want := cutChatBodyRef(&ref, bytes.Clone(body), "length")
	if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
		t.Errorf("%s: cutChatBody = %s; reference %s", name, got, want)
	}
	if w.bytes != ref.bytes || w.offset != ref.offset || (w.cut == nil) != (ref.cut == nil) ||
		w.cut != nil && !reflect.DeepEqual(*w.cut, *ref.cut) {
		t.Errorf("%s: watched %d bytes, cut %+v at %d; reference %d bytes, cut %+v at %d",
			name, w.bytes, w.cut, w.offset, ref.bytes, ref.cut, ref.offset)
	}
}

func TestBodyReadAgreesWithRef(t *testing.T) {
	cuts := 0
	for name, body := range bodyReadCases {
		checkBodyRead(t, name, []byte(body))
		cfg := DefaultConfig().Detect.Stream
		if cutChatBody(&cutWatch{cfg: &cfg}, []byte(body), "length") != nil {
			cuts++
		}
	}
	if cuts < 5 {
		t.Errorf("%d of the bodies were cut; the cases must exercise the cut", cuts)
	}
}

func FuzzBodyRead(f *testing.F) {
	for _, body := range bodyReadCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkBodyRead(t, "fuzz", body) })
}

// BenchmarkBodyRead is what the observer reads of a healthy ~700-byte
// non-streamed chat answer: its usage, and its text for the detector.
func BenchmarkBodyRead(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-AbC123","object":"chat.completion","created":1730000000,"model":"gpt-4o-2024-08-06",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"I read the configuration and the failing test. ` +
		`The timeout comes from the retry loop in client.go, which waits 30 seconds before giving up; the test sets ` +
		`a 5-second deadline, so it fails first. I will lower the retry wait in the test setup and keep the default ` +
		`for production.\n\nNext I will run the test suite again to check that nothing else depends on it.",` +
		`"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1843,"completion_tokens":96,` +
		`"total_tokens":1939,"prompt_tokens_details":{"cached_tokens":1536},"completion_tokens_details":{"reasoning_tokens":0}},` +
		`"system_fingerprint":"fp_abc123"}`)
	cfg := DefaultConfig().Detect.Stream
	w := cutWatch{cfg: &cfg}
	var sink observe.Usage
	b.Run("usage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = answerUsage(body)
		}
	})
	b.Run("usage+text", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = answerUsage(body)
			if cutChatBody(&w, body, "length") != nil {
				b.Fatal("a healthy answer was cut")
			}
			w.reset()
			w.cfg = &cfg
		}
	})
	_ = sink
}
