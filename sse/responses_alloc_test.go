//go:build !race

package sse

import "testing"

// A pooled accumulator folds a whole stream, text deltas included, without
// allocating: the streaming path runs for every event of every answer.
func TestResponsesAnthropicAllocs(t *testing.T) {
	var ra ResponsesAccumulator
	var aa AnthropicAccumulator
	tests := []struct {
		name  string
		file  string
		a     streamAcc
		reset func()
		delta string
	}{
		{"responses", "testdata/responses/reasoning-text-two-calls.sse", &ra, ra.Reset,
			`{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"a \"quoted\"\nline \u00e9","sequence_number":9}`},
		{"anthropic", "testdata/anthropic/tool-use.sse", &aa, aa.Reset,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a \"quoted\"\nline \u00e9"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := fixtureData(t, tt.file)
			sink := 0
			fn := func(u Update, _ error) { sink += len(u.Text) }
			whole := func() {
				tt.reset()
				for _, d := range ds {
					fn(tt.a.Add(d))
				}
			}
			whole()
			if n := testing.AllocsPerRun(100, whole); n != 0 {
				t.Errorf("%v allocations per pooled stream; want 0", n)
			}
			// Text deltas into the open message of a fresh stream.
			tt.reset()
			for _, d := range ds[:len(ds)/2] {
				fn(tt.a.Add(d))
			}
			delta := []byte(tt.delta)
			for range 100 {
				fn(tt.a.Add(delta)) // size the text buffer
			}
			if n := testing.AllocsPerRun(1000, func() { fn(tt.a.Add(delta)) }); n != 0 {
				t.Errorf("%v allocations per text delta; want 0", n)
			}
			if sink == 0 {
				t.Error("no text was reported")
			}
		})
	}
}
