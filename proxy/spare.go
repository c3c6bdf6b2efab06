package proxy

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// A connection's goroutine that relays a stream waits on it for the
// stream's whole life, with the stack the request left it: the chat
// pipeline (parsing the history, the session, the policy) grows it to
// 16 KiB, and the garbage collector halves a waiting goroutine's stack
// only when it runs, which an open stream that allocates nothing does not
// make it do. So the pipeline runs on a spare goroutine and the
// connection's keeps the 8 KiB the relay needs: 8 KiB less for every
// inspected open stream.
//
// The hand-off costs a request CPU of its own (the runtime wakes an idle
// core to look for the spare), which only a stream,
// holding its goroutine for seconds, earns back: a request whose body does
// not look streamed (looksStreamed) runs its pipeline where it is.
//
// The spares live on, a few per core: a goroutine started per request
// would allocate, and grow a fresh stack to 16 KiB again on every request
// (three copies). Beyond that many pipelines at once (a store that
// blocks), a request gets a goroutine of its own.

// spares runs pipelines on long-lived goroutines.
type spares struct {
	work chan *guardCall // an idle spare receives; unbuffered
	quit chan struct{}   // closed by Shutdown: idle spares end
	once sync.Once       // closes quit
	n    atomic.Int32    // spares alive
	max  int32
}

func newSpares() *spares {
	return &spares{work: make(chan *guardCall), quit: make(chan struct{}), max: int32(4 * runtime.GOMAXPROCS(0))}
}

// guardCall is one request's pipeline run on a spare goroutine; reused.
type guardCall struct {
	s    *Server
	ctx  *fasthttp.RequestCtx
	api  *wireAPI
	done chan any // the pipeline's panic, or nil
}

var guardCalls = sync.Pool{New: func() any { return &guardCall{done: make(chan any, 1)} }}

// guardOnSpareStack runs the pipeline for ctx on a spare goroutine and
// waits for it. A panic goes on in the connection's goroutine, as if the
// pipeline had run there.
func (s *Server) guardOnSpareStack(ctx *fasthttp.RequestCtx, api *wireAPI) {
	c := guardCalls.Get().(*guardCall)
	c.s, c.ctx, c.api = s, ctx, api
	s.spares.start(c)
	p := <-c.done
	*c = guardCall{done: c.done}
	guardCalls.Put(c)
	if p != nil {
		panic(p)
	}
}

// start hands c to an idle spare, or to a new one.
func (sp *spares) start(c *guardCall) {
	select {
	case sp.work <- c:
		return
	default:
	}
	if sp.n.Add(1) <= sp.max {
		go sp.serve(c)
		return
	}
	sp.n.Add(-1)
	go c.run()
}

// serve runs c, then every call it receives until Shutdown.
func (sp *spares) serve(c *guardCall) {
	defer sp.n.Add(-1)
	for {
		c.run()
		select {
		case c = <-sp.work:
		case <-sp.quit:
			return
		}
	}
}

// stop ends the idle spares; the busy ones end when their call returns.
func (sp *spares) stop() { sp.once.Do(func() { close(sp.quit) }) }

func (c *guardCall) run() {
	defer func() { c.done <- recover() }()
	c.s.pipeline.guard(c.ctx, c.s, c.api)
}

// streamHintSpan is how much of a body's start and end looksStreamed reads.
const streamHintSpan = 2 << 10

// looksStreamed reports a body that asks for a streamed answer in its first
// or last streamHintSpan bytes, where clients put their options around the
// history. It only picks the goroutine a pipeline runs on, never what is
// done: a stream it misses (its "stream" member between a long history and
// long tool definitions) keeps the larger stack, a body it takes for one
// pays the hand-off. Inside a JSON string the pattern's quotes would be
// escaped, so a history cannot fake it.
func looksStreamed(body []byte) bool { return hasStreamHint(body, "true") }

// looksStreamedFor is looksStreamed for a request of api: one of an API
// that streams by default (Ollama's) looks streamed unless it says
// "stream": false.
func looksStreamedFor(api *wireAPI, body []byte) bool {
	if api.streamByDefault {
		return !hasStreamHint(body, "false")
	}
	return looksStreamed(body)
}

// hasStreamHint reports a "stream" member whose value is val in the first
// or last streamHintSpan bytes of body.
func hasStreamHint(body []byte, val string) bool {
	if len(body) <= 2*streamHintSpan {
		return hasStream(body, val)
	}
	return hasStream(body[:streamHintSpan], val) || hasStream(body[len(body)-streamHintSpan:], val)
}

// hasStream reports a "stream" key whose value is val in b, with any
// spaces around the colon. It looks for the key's "m" and reads around it:
// a search for the whole key (bytes.Index) starts at its quote, which JSON
// is full of, and soon falls back to comparing the key at every byte.
func hasStream(b []byte, val string) bool {
	const key = `"stream"`
	const m = len(key) - 2 // the index of its 'm'
	for i := m; i+1 < len(b); i++ {
		j := bytes.IndexByte(b[i:len(b)-1], 'm')
		if j < 0 {
			return false
		}
		i += j
		if b[i+1] != '"' || string(b[i-m:i+2]) != key {
			continue
		}
		v := bytes.TrimLeft(b[i+2:], " \t\r\n")
		if len(v) > 0 && v[0] == ':' && bytes.HasPrefix(bytes.TrimLeft(v[1:], " \t\r\n"), []byte(val)) {
			return true
		}
	}
	return false
}
