package inject

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/internal/wireapi"
	"github.com/tidwall/gjson"
)

func TestInsertGemini(t *testing.T) {
	results := `{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"x"}}}]}`
	tests := []struct {
		name     string
		give     string
		p        Placement
		want     string
		wantUsed Placement
	}{
		{"auto next to functionResponse", `{"contents":[` + results + `]}`, Auto,
			`{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"x"}}},{"text":"NOTE"}]}]}`, Tool},
		{"tool not last", `{"contents":[` + results + `,{"role":"model","parts":[{"text":"a"}]}]}`, Tool,
			`{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"x"}}},{"text":"NOTE"}]},{"role":"model","parts":[{"text":"a"}]}]}`, Tool},
		{"auto after user text", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, Auto,
			`{"contents":[{"role":"user","parts":[{"text":"hi"},{"text":"NOTE"}]}]}`, User},
		{"auto after model", `{"contents":[{"role":"model","parts":[{"text":"a"}]}]}`, Auto,
			`{"contents":[{"role":"model","parts":[{"text":"a"}]},{"role":"user","parts":[{"text":"NOTE"}]}]}`, User},
		{"tool without results", `{"contents":[]}`, Tool, `{"contents":[{"role":"user","parts":[{"text":"NOTE"}]}]}`, User},
		{"system parts", `{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[]}`, System,
			`{"systemInstruction":{"parts":[{"text":"s"},{"text":"NOTE"}]},"contents":[]}`, System},
		{"system absent", `{"contents":[]}`, System, `{"systemInstruction":{"parts":[{"text":"NOTE"}]},"contents":[]}`, System},
	}
	for _, tt := range tests {
		for _, wrapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/wrapped=%v", tt.name, wrapped), func(t *testing.T) {
				give, want := tt.give, tt.want
				if wrapped {
					give = `{"model":"m","project":"p","request":` + give + `}`
					want = `{"model":"m","project":"p","request":` + want + `}`
				}
				got, used, err := InsertGemini([]byte(give), tt.p, "NOTE", wrapped)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != want || used != tt.wantUsed {
					t.Errorf("InsertGemini = %s, %s;\nwant %s, %s", got, used, want, tt.wantUsed)
				}
			})
		}
	}
	for _, give := range []string{`{"model":"x"}`, `{"contents":{}}`, `nope`, `{"systemInstruction":"s","contents":[]}`} {
		if _, _, err := InsertGemini([]byte(give), System, "x", false); err == nil && strings.Contains(give, "systemInstruction") {
			t.Errorf("InsertGemini(%s, system): no error", give)
		}
		if _, _, err := InsertGemini([]byte(give), Auto, "x", true); err == nil {
			t.Errorf("InsertGemini(%s, wrapped): no error", give)
		}
	}
}

// geminiTurn is one model turn of Gemini CLI (a call without an id) and
// its results content.
func geminiTurn(_ int, cmd string) string {
	return fmt.Sprintf(`{"role":"model","parts":[{"text":"Trying."},{"functionCall":{"name":"bash","args":{"command":"%s"}}}]},`+
		`{"role":"user","parts":[{"functionResponse":{"name":"bash","response":{"error":"exit code 2"}}}]}`, cmd)
}

func TestCollapseGemini(t *testing.T) {
	rep := []string{"make build", "make build", "make build", "make build", "make build"}
	cycle := []string{"make build", "make test", "make build", "make test", "make build", "make test"}
	body := func(cmds []string) string {
		return `{"contents":[{"role":"user","parts":[{"text":"Fix the build."}]},` + historyOf(cmds, geminiTurn) + `]}`
	}
	tests := []struct {
		name      string
		cmds      []string
		wantTurns int
		wantNote  string
	}{
		{"repetition", rep, 4, "repeated 5 times"},
		{"cycle", cycle, 4, "repeated 3 times"},
	}
	in := newTestInjector(t)
	for _, tt := range tests {
		for _, wrapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/wrapped=%v", tt.name, wrapped), func(t *testing.T) {
				b, api, arr := body(tt.cmds), wireapi.Gemini, "contents"
				if wrapped {
					b, api, arr = `{"model":"m","project":"p","request":`+b+`}`, wireapi.CodeAssist, "request.contents"
				}
				orig := []byte(b)
				out, c, err := in.CollapseGemini([]byte(b), loopCalls(t, api, []byte(b)), wrapped)
				if err != nil {
					t.Fatal(err)
				}
				if !gjson.ValidBytes(out) {
					t.Fatalf("output is not valid JSON:\n%s", out)
				}
				if c.Turns != tt.wantTurns || c.Messages != 2*tt.wantTurns {
					t.Errorf("collapsed %+v; want %d turns", c, tt.wantTurns)
				}
				if got := len(gjson.GetBytes(orig, arr).Array()) - len(gjson.GetBytes(out, arr).Array()); got != 2*tt.wantTurns {
					t.Errorf("%d contents fewer; want %d", got, 2*tt.wantTurns)
				}
				if !strings.Contains(string(out), Marker+" this call was "+tt.wantNote) {
					t.Errorf("no note %q in\n%s", tt.wantNote, out)
				}
				// Model and user contents still alternate, each call answered
				// by the content after it.
				role := ""
				for _, v := range gjson.GetBytes(out, arr).Array() {
					r := v.Get("role").String()
					if r == role {
						t.Fatalf("two %s contents in a row:\n%s", r, out)
					}
					role = r
					if r == "model" && strings.Count(v.Raw, "functionCall") != 1 {
						t.Errorf("model content %s", v.Raw)
					}
				}
			})
		}
	}
}

func TestTerminateGemini(t *testing.T) {
	in := stableInjector(t, Config{})
	l := Loop{Verdict: readVerdict(t, "tool_repetition")}
	for _, f := range []GeminiForm{{}, {Stream: true}, {Stream: true, SSE: true}, {Wrapped: true}, {Stream: true, SSE: true, Wrapped: true}} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			f.Model = "gemini-2.5-pro"
			res, err := in.TerminateGemini([]byte(`{"contents":[]}`), l, f)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != http.StatusOK {
				t.Errorf("status %d", res.Status)
			}
			body := res.Body
			switch {
			case f.Stream && f.SSE:
				if !bytes.HasPrefix(body, []byte("data: ")) || !bytes.HasSuffix(body, []byte("\r\n\r\n")) {
					t.Fatalf("not one SSE event: %q", body)
				}
				body = bytes.TrimSpace(body[len("data: "):])
			case f.Stream:
				arr := gjson.ParseBytes(body)
				if !arr.IsArray() || len(arr.Array()) != 1 {
					t.Fatalf("not a one-element array: %s", body)
				}
				body = []byte(arr.Array()[0].Raw)
			}
			ans := gjson.ParseBytes(body)
			if f.Wrapped {
				ans = ans.Get("response")
			}
			cand := ans.Get("candidates.0")
			if cand.Get("finishReason").String() != "STOP" || cand.Get("content.role").String() != "model" ||
				!strings.HasPrefix(cand.Get("content.parts.0.text").String(), "LOOP_DETECTED") || ans.Get("modelVersion").String() != "gemini-2.5-pro" {
				t.Errorf("answer %s", res.Body)
			}
		})
	}
	in = stableInjector(t, Config{TerminateAs: AsError})
	for _, tt := range []struct {
		l              Loop
		status, prefix string
	}{
		{l, "FAILED_PRECONDITION", "LOOP_DETECTED"},
		{Loop{Budget: &Budget{Kind: "tokens", Used: 120, Limit: 100}}, "RESOURCE_EXHAUSTED", "BUDGET_EXCEEDED:"},
	} {
		res, err := in.TerminateGemini(nil, tt.l, GeminiForm{Stream: true, SSE: true})
		if err != nil {
			t.Fatal(err)
		}
		if e := gjson.GetBytes(res.Body, "error"); res.Status != DefaultErrorStatus || e.Get("code").Int() != int64(res.Status) ||
			e.Get("status").String() != tt.status || !strings.HasPrefix(e.Get("message").String(), tt.prefix) {
			t.Errorf("%s error answer %d %s; want %d, status %s", tt.prefix, res.Status, res.Body, DefaultErrorStatus, tt.status)
		}
	}
}

func TestAppendGeminiCut(t *testing.T) {
	c := GeminiChunk{FinishReason: "STOP", Model: "m", OutputTokens: 3, Wrapped: true}
	got := string(AppendGeminiCut(nil, "token_degeneration", c, true))
	want := ": loopguard cut category=token_degeneration\r\n\r\n" +
		`data: {"response":{"candidates":[{"content":{"role":"model","parts":[]},"finishReason":"STOP","finishMessage":"loopguard cut category=token_degeneration","index":0}],` +
		`"usageMetadata":{"promptTokenCount":0,"candidatesTokenCount":3,"totalTokenCount":3},"modelVersion":"m"}}` + "\r\n\r\n"
	if got != want {
		t.Errorf("AppendGeminiCut(sse) =\n%q\nwant\n%q", got, want)
	}
	c.Wrapped = false
	arr := "[{\"candidates\":[]}" + string(AppendGeminiCut(nil, "x", c, false))
	if v := gjson.Parse(arr); !v.IsArray() || len(v.Array()) != 2 {
		t.Errorf("array after the cut is not a two-element array: %s", arr)
	}
}

// FuzzInsertGemini: no panic; a result is valid JSON that still holds
// the text.
func FuzzInsertGemini(f *testing.F) {
	f.Add([]byte(`{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{}}}]}]}`), uint8(0))
	f.Add([]byte(`{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[]}`), uint8(3))
	f.Add([]byte(`{"contents":[{"parts":[{"text":"q"}]}]}`), uint8(2))
	fuzzInsert(f, func(b []byte, p Placement, text string) ([]byte, Placement, error) {
		return InsertGemini(b, p, text, false)
	})
}

// FuzzInsertCodeAssist is FuzzInsertGemini for the wrapped request.
func FuzzInsertCodeAssist(f *testing.F) {
	f.Add([]byte(`{"model":"m","request":{"contents":[{"role":"user","parts":[{"text":"q"}]}]}}`), uint8(0))
	f.Add([]byte(`{"request":{"systemInstruction":{},"contents":[]}}`), uint8(3))
	fuzzInsert(f, func(b []byte, p Placement, text string) ([]byte, Placement, error) {
		return InsertGemini(b, p, text, true)
	})
}
