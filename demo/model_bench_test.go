package demo

import (
	"encoding/json"
	"testing"

	"github.com/loopguard/loopguard/fakellm"
)

// BenchmarkRespond measures one decision of the scripted model on a
// recorded history, the cost it adds to every request in Serve mode.
func BenchmarkRespond(b *testing.B) {
	for _, name := range []string{"listener_read_makefile.json", "plain_tool_offered.json"} {
		req := &fakellm.Request{Body: readModelFixture(b, name)}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(req.Body)))
			for b.Loop() {
				respond(req)
			}
		})
	}
}

// BenchmarkRespondEncodingJSON is the naive baseline: decoding the same
// request with encoding/json before deciding anything.
func BenchmarkRespondEncodingJSON(b *testing.B) {
	body := readModelFixture(b, "listener_read_makefile.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var v struct {
			Model    string            `json:"model"`
			Messages []json.RawMessage `json:"messages"`
			Tools    []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}
