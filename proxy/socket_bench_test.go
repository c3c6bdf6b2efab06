package proxy

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
)

// socketBenchEvents is the answer both benchmarks relay: a message streamed
// in small deltas, as a model streams one.
const socketBenchEvents = 200

func benchDelta(i int) string {
	return fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"word%d "}`, i+2, i)
}

// BenchmarkSocketRelayEvent is the cost of one event of a guarded answer
// relayed over a Responses WebSocket, end to end over loopback;
// BenchmarkHTTPStreamEvent the same answer as an SSE stream, for
// comparison.
func BenchmarkSocketRelayEvent(b *testing.B) {
	up := startSocketUpstream(b, func(n int, _ string, send func(string) error) {
		_ = send(fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_%d","status":"in_progress","output":[]}}`, n))
		for i := 0; i < socketBenchEvents; i++ {
			_ = send(benchDelta(i))
		}
		_ = send(fmt.Sprintf(`{"type":"response.completed","sequence_number":%d,"response":{"id":"resp_%d","status":"completed","output":[]}}`, socketBenchEvents+2, n))
	})
	addr, _ := startSocketProxy(b, up.URL, nil)
	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/responses", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := []byte(`{"type":"response.create","model":"gpt-4.1","store":false,"input":"hi"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += socketBenchEvents {
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			b.Fatal(err)
		}
		for {
			_, m, err := c.ReadMessage()
			if err != nil {
				b.Fatal(err)
			}
			if gjson.GetBytes(m, "type").String() == "response.completed" {
				break
			}
		}
	}
}

func BenchmarkHTTPStreamEvent(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		bw := bufio.NewWriter(w)
		fmt.Fprintf(bw, "event: response.created\ndata: %s\n\n", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}`)
		for i := 0; i < socketBenchEvents; i++ {
			fmt.Fprintf(bw, "event: response.output_text.delta\ndata: %s\n\n", benchDelta(i))
			bw.Flush()
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(bw, "event: response.completed\ndata: %s\n\n", `{"type":"response.completed","sequence_number":202,"response":{"id":"resp_1","status":"completed","output":[]}}`)
		bw.Flush()
	}))
	defer up.Close()
	addr, _ := startSocketProxy(b, up.URL, nil)
	client := newClient()
	body := `{"model":"gpt-4.1","store":false,"stream":true,"input":"hi"}`
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += socketBenchEvents {
		resp, err := client.Post("http://"+addr+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				break
			}
			_ = line
		}
		resp.Body.Close()
	}
}
