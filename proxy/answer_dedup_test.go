package proxy

import (
	"testing"

	"github.com/loopguard/loopguard/inspect"
	"github.com/loopguard/loopguard/sse"
)

// callList is an answer that holds only tool calls.
type callList struct {
	answer
	calls [][2]string
}

func (c callList) toolCall(pos int) (name, args []byte, ok bool) {
	if pos < 0 || pos >= len(c.calls) {
		return nil, nil, false
	}
	return []byte(c.calls[pos][0]), []byte(c.calls[pos][1]), true
}

func TestCallDedup(t *testing.T) {
	build := [2]string{"bash", `{"command":"make build"}`}
	// The same arguments in another key order are the same call.
	buildReordered := [2]string{"bash", `{ "command" : "make build" }`}
	test := [2]string{"bash", `{"command":"make test"}`}
	started := func(pos int) sse.Update { return sse.Update{ToolCall: true, ToolCallStarted: pos, ToolCallDone: -1} }
	finished := sse.Update{FinishReason: []byte("stop"), ToolCallStarted: -1, ToolCallDone: -1}
	done := func(pos int) sse.Update { return sse.Update{ToolCallStarted: -1, ToolCallDone: pos} }
	tests := []struct {
		name    string
		calls   [][2]string
		updates []sse.Update
		wantCut bool
	}{
		{"chat: two calls, then finish", [][2]string{build, test}, []sse.Update{started(0), started(1), finished}, false},
		{"chat: a duplicate, then finish", [][2]string{build, buildReordered}, []sse.Update{started(0), started(1), finished}, true},
		{"chat: a duplicate still streaming", [][2]string{build, test, build}, []sse.Update{started(0), started(1), started(2)}, false},
		{"chat: the duplicate completes when the next call begins", [][2]string{build, build, test}, []sse.Update{started(0), started(1), started(2)}, true},
		{"items: two calls completed", [][2]string{build, test}, []sse.Update{done(0), done(1)}, false},
		{"items: a duplicate completed", [][2]string{build, build}, []sse.Update{done(0), done(1)}, true},
		{"items: a call that is not there", [][2]string{build}, []sse.Update{done(0), done(1)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d callDedup
			var w cutWatch
			a := callList{calls: tt.calls}
			for _, u := range tt.updates {
				d.note(&u, a, &w)
			}
			if got := w.cut != nil; got != tt.wantCut {
				t.Fatalf("cut = %v; want %v", got, tt.wantCut)
			}
			if tt.wantCut && (w.cut.Category != inspect.ToolRepetition || w.cut.Evidence.Tool != "bash") {
				t.Errorf("cut = %+v; want tool_repetition of bash", *w.cut)
			}

			d.reset()
			if len(d.calls) != 0 || d.checked != 0 {
				t.Errorf("after reset: %d calls, %d checked; want none", len(d.calls), d.checked)
			}
			// The calls of the answer before are forgotten.
			w = cutWatch{}
			u := done(0)
			d.note(&u, a, &w)
			if w.cut != nil {
				t.Error("a reset dedup cut the first call of the next answer")
			}
		})
	}
}
