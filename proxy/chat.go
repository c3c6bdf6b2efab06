package proxy

import (
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// chatPipeline runs policy, inspect and inject on chat-completion requests.
type chatPipeline struct {
	log zerolog.Logger
}

func newChatPipeline(cfg Config, log zerolog.Logger) (*chatPipeline, error) {
	return &chatPipeline{log: log}, nil
}

func (p *chatPipeline) serve(ctx *fasthttp.RequestCtx, s *Server) {
	s.forward(ctx, ctx.Request.Body(), nil)
}

// Close releases the session store.
func (p *chatPipeline) Close() error { return nil }
