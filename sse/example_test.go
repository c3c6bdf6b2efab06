package sse_test

import (
	"fmt"
	"io"
	"strings"

	"github.com/loopguard/loopguard/sse"
)

func Example() {
	stream := ": ping\n\n" +
		"data: {\"id\":\"chatcmpl-1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"{\\\"dir\\\":\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\".\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n" +
		"data: [DONE]\n\n"

	r := sse.NewReader(strings.NewReader(stream), 1<<20)
	var acc sse.ChatAccumulator
	var forwarded int
	for {
		ev, err := r.Next()
		if err != nil {
			if err != io.EOF {
				fmt.Println("read:", err)
			}
			break
		}
		forwarded += len(ev.Raw) // a proxy writes ev.Raw to the client here
		if ev.Comment || ev.Data == nil {
			continue
		}
		deltas, err := acc.Add(ev.Data)
		if err != nil {
			fmt.Println("chunk:", err)
		}
		for _, d := range deltas {
			if len(d.Text) > 0 {
				fmt.Printf("text %q\n", d.Text)
			}
			if d.ToolCallStarted >= 0 {
				fmt.Println("tool call started at", d.ToolCallStarted)
			}
			if d.FinishReason != nil {
				fmt.Println("finish", string(d.FinishReason))
			}
		}
	}
	c := acc.Choices()[0]
	fmt.Println(forwarded == len(stream), acc.Done(), c.Role, c.Content)
	fmt.Println(c.ToolCalls[0].Name, c.ToolCalls[0].Arguments)
	// Output:
	// text "Hi"
	// tool call started at 0
	// finish tool_calls
	// true true assistant Hi
	// ls {"dir":"."}
}
