package proxy

import (
	"sync"

	"github.com/valyala/fasthttp"
)

// A connection's goroutine that relays a stream waits on it for the
// stream's whole life, with the stack the request left it: the chat
// pipeline (parsing the history, the session, the policy) grows it to
// 16 KiB, and the garbage collector halves a waiting goroutine's stack
// only when it runs, which an open stream that allocates nothing does not
// make it do. So the pipeline runs on a goroutine of its own, which gives
// its stack back when the request is decided, and the connection's keeps
// the 8 KiB the relay needs: 8 KiB less for every inspected open stream.
// It costs a goroutine start and two switches per request.

// guardCall is one request's pipeline run on a spare goroutine; reused.
type guardCall struct {
	s    *Server
	ctx  *fasthttp.RequestCtx
	api  *wireAPI
	done chan any // the pipeline's panic, or nil
}

var guardCalls = sync.Pool{New: func() any { return &guardCall{done: make(chan any, 1)} }}

// guardOnSpareStack runs the pipeline for ctx on a goroutine of its own and
// waits for it. A panic goes on in the connection's goroutine, as if the
// pipeline had run there.
func (s *Server) guardOnSpareStack(ctx *fasthttp.RequestCtx, api *wireAPI) {
	c := guardCalls.Get().(*guardCall)
	c.s, c.ctx, c.api = s, ctx, api
	go c.run()
	p := <-c.done
	*c = guardCall{done: c.done}
	guardCalls.Put(c)
	if p != nil {
		panic(p)
	}
}

func (c *guardCall) run() {
	defer func() { c.done <- recover() }()
	c.s.pipeline.guard(c.ctx, c.s, c.api)
}
