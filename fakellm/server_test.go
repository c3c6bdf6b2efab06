package fakellm

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// post sends body to srv and returns the status, header and whole body.
func post(t *testing.T, url, path, body string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func TestServerRecordsAndPlaysInOrder(t *testing.T) {
	srv := Start(t, Script{Responses: []Response{
		{Dialect: VLLM, Content: "first"},
		{Dialect: LlamaCpp, Content: "second"},
	}})
	const body = `{"model":"qwen","stream":true,"stream_options":{"include_usage":true},"messages":[]}`
	status, hdr, got1 := post(t, srv.URL(), "/v1/chat/completions?x=1", body, map[string]string{"Authorization": "Bearer k"})
	if status != 200 || hdr.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("first answer: status %d, content-type %q", status, hdr.Get("Content-Type"))
	}
	_, _, got2 := post(t, srv.URL(), "/v1/chat/completions", `{"model":"qwen"}`, nil)
	status3, _, got3 := post(t, srv.URL(), "/v1/chat/completions", `{}`, nil)

	xs := srv.Exchanges()
	if len(xs) != 3 {
		t.Fatalf("recorded %d exchanges; want 3", len(xs))
	}
	r := xs[0].Request
	if r.Method != "POST" || r.Path != "/v1/chat/completions" || r.RawQuery != "x=1" || string(r.Body) != body ||
		r.Header.Get("Authorization") != "Bearer k" || !r.Stream || !r.IncludeUsage || r.Model != "qwen" {
		t.Errorf("recorded request = %+v", r)
	}
	if !bytes.Equal(xs[0].Body, got1) || !bytes.Equal(xs[1].Body, got2) {
		t.Errorf("recorded bodies differ from the bytes received")
	}
	if !xs[0].Stream || xs[0].Events != bytes.Count(got1, []byte("\n\n")) || xs[0].Unsent != 0 || !xs[0].Done {
		t.Errorf("stream record = stream %v events %d unsent %d done %v", xs[0].Stream, xs[0].Events, xs[0].Unsent, xs[0].Done)
	}
	if !bytes.Contains(got1, []byte(`"content":"first"`)) || !bytes.Contains(got1, []byte(`"choices":[],"usage"`)) {
		t.Errorf("first answer lacks content or usage chunk:\n%s", got1)
	}
	if !bytes.Contains(got2, []byte(`"content":"second"`)) || bytes.HasPrefix(got2, []byte("data:")) {
		t.Errorf("second answer = %s; want a llama.cpp JSON body", got2)
	}
	if status3 != 500 || !bytes.Contains(got3, []byte("script exhausted")) {
		t.Errorf("exhausted script answered %d %s", status3, got3)
	}
}

func TestServerRulesAndBuiltins(t *testing.T) {
	srv := Start(t, Script{
		Rules: []Rule{{
			Match:   func(r *Request) bool { return r.Path == "/v1/responses" },
			Respond: func(r *Request) Response { return Response{Raw: []byte("event: x\ndata: {}\n\n")} },
		}},
		Loop:      true,
		Responses: []Response{{Content: "again"}},
	})
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantBody                 string
		wantHeader               [2]string
	}{
		{"rule", "POST", "/v1/responses", `{}`, 200, "event: x\ndata: {}\n\n", [2]string{"Content-Type", "text/event-stream"}},
		{"models", "GET", "/v1/models", "", 200, `"id":"fake-model"`, [2]string{"Content-Type", "application/json"}},
		{"embeddings", "POST", "/v1/embeddings", `{"model":"e","input":["a","b"]}`, 200, `"index":1,"embedding"`, [2]string{"Content-Type", "application/json"}},
		{"echo", "PUT", "/x/y?q=%20z", "raw body", 200, "raw body", [2]string{"X-Fake-Query", "q=%20z"}},
		{"loop 1", "POST", "/v1/chat/completions", `{}`, 200, `"content": "again"`, [2]string{"Content-Type", "application/json"}},
		{"loop 2", "POST", "/chat/completions", `{}`, 200, `"content": "again"`, [2]string{"Content-Type", "application/json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL()+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(b), tt.wantBody) ||
				resp.Header.Get(tt.wantHeader[0]) != tt.wantHeader[1] {
				t.Errorf("%s %s = %d %v %q; want %d, %s=%q, body containing %q", tt.method, tt.path,
					resp.StatusCode, resp.Header, b, tt.wantStatus, tt.wantHeader[0], tt.wantHeader[1], tt.wantBody)
			}
		})
	}
}

func TestServerErrorAfter(t *testing.T) {
	for _, d := range Dialects {
		t.Run(d.String(), func(t *testing.T) {
			srv := Start(t, Script{Responses: []Response{{Dialect: d, Content: "abcdefghijkl", ChunkSize: 2, Error: "boom", ErrorAfter: 3}}})
			_, _, got := post(t, srv.URL(), "/v1/chat/completions", `{"stream":true}`, nil)
			frames := strings.Split(strings.TrimSuffix(string(got), "\n\n"), "\n\n")
			if len(frames) < 4 || !strings.Contains(frames[3], `"boom"`) {
				t.Fatalf("frames = %q; want the error as the 4th", frames)
			}
			wantDone := d == VLLM
			if gotDone := strings.HasSuffix(string(got), "data: [DONE]\n\n"); gotDone != wantDone {
				t.Errorf("[DONE] after error = %v; want %v", gotDone, wantDone)
			}
			x := srv.Exchanges()[0]
			// 1 role (or first content for Ollama) + 6 content + finish,
			// usage-less, [DONE] (+ keep-alive for llama.cpp); 3 sent.
			if x.Unsent <= 0 {
				t.Errorf("Unsent = %d; want > 0", x.Unsent)
			}
		})
	}
}

// TestServerNoticesPeerClose is the fake's half of the 100 ms cancellation
// contract: a client that hangs up mid-stream is seen at once.
func TestServerNoticesPeerClose(t *testing.T) {
	tests := []struct {
		name string
		give Response
	}{
		{"never end", Response{Dialect: OpenAI, Content: "loop loop ", NeverEnd: true, Delay: time.Millisecond}},
		{"slow finite", Response{Dialect: VLLM, Content: strings.Repeat("x", 400), ChunkSize: 4, Delay: 20 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := Start(t, Script{Responses: []Response{tt.give}})
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.URL(), "http://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			body := `{"stream":true}`
			_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n"+body)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			// Read the header and a few events, then hang up.
			for n := 0; n < 3; {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(line, "data: ") {
					n++
				}
			}
			closed := time.Now()
			conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			xs, err := srv.Wait(ctx, func(xs []Exchange) bool { return len(xs) == 1 && xs[0].Done })
			if err != nil {
				t.Fatal(err)
			}
			x := xs[0]
			if !x.PeerClosed {
				t.Fatalf("PeerClosed = false; exchange %+v", x)
			}
			// At once, not at the end of the slow answer (2 s): the bound
			// leaves room for a loaded machine under -race.
			if lag := x.ClosedAt.Sub(closed); lag > time.Second {
				t.Errorf("fake noticed the close after %v; want it at once", lag)
			}
			if tt.give.NeverEnd && x.Unsent != -1 || !tt.give.NeverEnd && x.Unsent <= 0 {
				t.Errorf("Unsent = %d", x.Unsent)
			}
		})
	}
}

func TestServerStatusAndHeaders(t *testing.T) {
	srv := Start(t, Script{Responses: []Response{
		{Dialect: Ollama, Status: 404, Error: `model "x" not found`, Header: http.Header{"X-Extra": {"1"}}},
	}})
	status, hdr, got := post(t, srv.URL(), "/v1/chat/completions", `{"stream":true}`, nil)
	want := `{"error":{"message":"model \"x\" not found","type":"api_error","param":null,"code":null}}` + "\n"
	if status != 404 || string(got) != want || hdr.Get("X-Extra") != "1" || hdr.Get("Content-Length") != "90" {
		t.Errorf("answer = %d %v %q; want 404 %q", status, hdr, got, want)
	}
}

func TestCloseEndsEndlessStream(t *testing.T) {
	srv := New(Script{Responses: []Response{{NeverEnd: true}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+ln.Addr().String()+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := srv.Wait(ctx, func(xs []Exchange) bool { return len(xs) == 1 && xs[0].Events > 2 }); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		// A clean EOF is fine too: what matters is that it ended.
		t.Log("stream ended with EOF")
	}
	if x := srv.Exchanges()[0]; !x.Done || x.PeerClosed {
		t.Errorf("after Close: done %v peerClosed %v; want done, not a peer close", x.Done, x.PeerClosed)
	}
}
