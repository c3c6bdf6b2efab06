package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/policy"
)

func TestAnswerRecord(t *testing.T) {
	p := testPipeline(t)
	stream := streamAPIsByWire(t)[responsesAPI].healthy
	const body = `{"id":"resp_body","object":"response","status":"completed","output":[` +
		`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]},` +
		`{"id":"rs_1","type":"reasoning","summary":[]}]}`
	input := `{"role":"user","content":"Fix the build."}`
	tests := []struct {
		name     string
		api      *wireAPI
		record   bool
		stream   string // "" for a non-streamed answer
		wantID   string // the response the record is saved under, "" for none
		wantType string // the type of the last item recorded
	}{
		{"chat answers are not recorded", chatAPI, true, "", "", ""},
		{"a request without a record plan", responsesAPI, false, "", "", ""},
		{"a non-streamed answer", responsesAPI, true, "", "resp_body", "message"},
		{"a streamed answer, saved on response.completed", responsesAPI, true, stream, "resp_h", "function_call"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl := &plan{api: tt.api, requestFacts: requestFacts{stream: tt.stream != ""}}
			if tt.record {
				pl.record = &recordPlan{input: []string{input}}
			}
			o := newAnswerObserver(p, pl, nil)
			defer o.release()
			r := &o.record
			if got := r.active(); got != (tt.wantID != "") {
				t.Fatalf("active = %v; want %v", got, tt.wantID != "")
			}
			if tt.stream != "" {
				if got, _ := observeStream(t, o, tt.stream); got != tt.stream {
					t.Fatalf("client got %q; want the stream unchanged", got)
				}
				if !r.saved {
					t.Error("the record was not saved when the stream completed")
				}
			} else {
				o.body(200, []byte(body), false)
				r.finish()
			}
			if tt.wantID == "" {
				return
			}
			items, err := p.policy.Record(context.Background(), policy.RecordKey(tt.wantID, ""))
			if err != nil || len(items) < 2 {
				t.Fatalf("Record(%s) = %d items, %v; want the input and the answer's output", tt.wantID, len(items), err)
			}
			if items[0] != input || !strings.Contains(items[len(items)-1], `"type":"`+tt.wantType+`"`) {
				t.Errorf("record = %v; want the input first and a %s item last", items, tt.wantType)
			}

			o.reset()
			if r.active() || r.saved || r.id != "" || r.output != "" || o.plan != nil || o.recording {
				t.Errorf("after reset: %+v; want an inactive record", *r)
			}
		})
	}
}
