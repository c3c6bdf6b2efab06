package proxy

import (
	"context"

	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
)

// wireAPI is what the request flow needs to know about one wire API that
// loopguard guards (chat completions, the Responses API, Anthropic
// Messages). Its hooks are fields, as httputil.ReverseProxy's are: the flow
// calls them and never asks which API it serves. Each API is one value,
// declared in its own file (api_chat.go, api_responses.go,
// api_anthropic.go); guardedAPI maps request paths to them. Adding an API
// is one more such file, its inject and sse counterparts, and its tests.
type wireAPI struct {
	// name is the API as inspect and policy know it.
	name inspect.API
	// apply writes a decision's warnings, constraints and collapse into a
	// request body (inject.Injector's Apply and its kin).
	apply func(in *inject.Injector, body []byte, e inject.Edit) (inject.Result, error)
	// terminate renders LOOP_DETECTED as the API answers it: a message, a
	// stream or an error, as the request asked.
	terminate func(in *inject.Injector, body []byte, l inject.Loop) (inject.Response, error)
	// history, if not nil, returns the history to judge when a request may
	// continue one the upstream keeps (Responses: responses_record.go), and
	// sets pl.record to extend it with the answer. Nil: the request carries
	// its whole history.
	history func(p *pipeline, ctx context.Context, pl *plan, body []byte) []byte
}
