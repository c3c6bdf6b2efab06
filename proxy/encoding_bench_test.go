package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/loopguard/loopguard/policy"
)

// codexHistory is a Responses request as Codex sends one late in a session:
// n turns of a command and its output (about 2 KB each), with store false,
// so the whole history comes on every turn.
func codexHistory(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-5.5","instructions":"You are Codex, a coding agent.","stream":true,"store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Fix the failing build."}]}`)
	for i := 0; i < n; i++ {
		out := strings.Repeat(fmt.Sprintf("%d: func handler%d(w http.ResponseWriter) {}\\n", i, i), 40)
		fmt.Fprintf(&b, `,{"type":"function_call","call_id":"call_%d","name":"exec_command","arguments":"{\"cmd\":\"sed -n 1,40p src/file%d.go\"}"}`, i, i)
		fmt.Fprintf(&b, `,{"type":"function_call_output","call_id":"call_%d","output":"Chunk ID: %06x\nWall time: 0.01 seconds\nProcess exited with code 0\nOutput:\n%s"}`, i, i, out)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkCodedTurn is what a zstd-coded request body adds to a turn:
// the decode of a ~300 KB Responses history (Codex signed in with ChatGPT
// codes every turn), beside the turn's inspection (decide: options,
// session, the parse of the history with a warm session cache, detectors,
// policy) of the same body plain; and the re-encoding a rewrite costs.
func BenchmarkCodedTurn(b *testing.B) {
	body := codexHistory(140)
	cs, _ := parseCodings([]byte("zstd"))
	coded := encodeAs(b, "zstd", body)
	b.Logf("history %d bytes, %d coded", len(body), len(coded))
	b.Run("decode_zstd", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			c, err := decodeBody(cs, coded, 64<<20, nil)
			if err != nil {
				b.Fatal(err)
			}
			c.release()
		}
	})
	b.Run("encode_zstd", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		var dst []byte
		for b.Loop() {
			dst = cs.encode(dst[:0], body)
		}
	})
	for _, enc := range []string{"", "zstd"} {
		name := "decide_plain"
		if enc != "" {
			name = "decode_and_decide_" + enc
		}
		b.Run(name, func(b *testing.B) {
			p, ctx := modePipeline(b, policy.ModeEnforce), chatRequest("bench")
			ctx.Request.SetRequestURI("/v1/responses")
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				in := body
				var c *codedBody
				if enc != "" {
					var err error
					if c, err = decodeBody(cs, coded, 64<<20, nil); err != nil {
						b.Fatal(err)
					}
					in = c.decoded
				}
				pl := p.decide(ctx, responsesAPI, in)
				if c != nil {
					if out := c.wire(pl.body); &out[0] != &coded[0] {
						b.Fatal("a healthy turn was re-coded")
					}
					c.release()
				}
				pl.releaseBody()
			}
		})
	}
}
