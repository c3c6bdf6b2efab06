package sse

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
)

// benchStream is 500 events shaped like an OpenAI stream: role chunk, text
// deltas with escapes, a tool call in fragments, finish, usage, [DONE].
func benchStream() []byte {
	var b bytes.Buffer
	head := `{"id":"chatcmpl-B","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_5050236cbd","choices":[{"index":0,"delta":`
	tail := `,"logprobs":null,"finish_reason":null}]}`
	fmt.Fprintf(&b, "data: %s{\"role\":\"assistant\",\"content\":\"\"}%s\n\n", head, tail)
	for i := range 300 {
		fmt.Fprintf(&b, "data: %s{\"content\":\"token %d \\\"q\\\"\\n\"}%s\n\n", head, i, tail)
	}
	fmt.Fprintf(&b, "data: %s{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"\"}}]}%s\n\n", head, tail)
	for range 195 {
		fmt.Fprintf(&b, "data: %s{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"cmd\\\": \\\"go\"}}]}%s\n\n", head, tail)
	}
	fmt.Fprintf(&b, "data: %s{}%s\n\n", head, `,"logprobs":null,"finish_reason":"tool_calls"}]}`)
	b.WriteString(`data: {"id":"chatcmpl-B","object":"chat.completion.chunk","created":1727346178,"model":"gpt-4o-2024-08-06","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkReader500 reads a 500-event stream (one op) in 4 KiB reads.
func BenchmarkReader500(b *testing.B) {
	in := benchStream()
	var src chunkReader
	sizes := []int{4096}
	r := NewReader(&src, 0)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		src = chunkReader{b: in, sizes: sizes}
		r.Reset(&src)
		n := 0
		for {
			if _, err := r.Next(); err != nil {
				break
			}
			n++
		}
		if n != 500 {
			b.Fatalf("%d events", n)
		}
	}
}

// BenchmarkReader500Scanner is the naive baseline: bufio.Scanner lines (and
// its 64 KiB line limit) with a fresh reader per stream.
func BenchmarkReader500Scanner(b *testing.B) {
	in := benchStream()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		sc := bufio.NewScanner(&chunkReader{b: in, sizes: []int{4096}})
		var data []byte
		n := 0
		for sc.Scan() {
			line := sc.Bytes()
			if len(line) == 0 {
				n++
				data = data[:0]
				continue
			}
			if v, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				data = append(data, v...)
			}
		}
		if n != 500 {
			b.Fatalf("%d events", n)
		}
	}
}

func benchChunks(b *testing.B) [][]byte {
	in := benchStream()
	r := NewReader(bytes.NewReader(in), 0)
	var out [][]byte
	for {
		e, err := r.Next()
		if err == io.EOF {
			return out
		}
		out = append(out, bytes.Clone(e.Data))
	}
}

// BenchmarkAccumulatorChunk folds the 500 chunks of the stream; ns/op is
// per chunk.
func BenchmarkAccumulatorChunk(b *testing.B) {
	chunks := benchChunks(b)
	var a ChatAccumulator
	var n int
	fn := func(ds []Update, _ error) {
		for _, d := range ds {
			n += len(d.Text)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(chunks) {
			i = 0
			a.Reset()
		}
		fn(a.Add(chunks[i]))
		i++
	}
}

// BenchmarkAccumulatorChunkEncodingJSON is the naive baseline: decode every
// chunk with encoding/json and concatenate strings.
func BenchmarkAccumulatorChunkEncodingJSON(b *testing.B) {
	type chunk struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	chunks := benchChunks(b)
	var content, args string
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(chunks) {
			i, content, args = 0, "", ""
		}
		var c chunk
		if json.Unmarshal(chunks[i], &c) == nil {
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					content += *ch.Delta.Content
				}
				for _, tc := range ch.Delta.ToolCalls {
					args += tc.Function.Arguments
				}
			}
		}
		i++
	}
}
