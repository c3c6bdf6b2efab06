package proxy

import (
	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
)

// responsesAPI is OpenAI's Responses API (POST /v1/responses), which Codex
// speaks. A request may continue a history the upstream keeps; loopguard
// keeps its own record of it (responses_record.go).
var responsesAPI = &wireAPI{
	name:      inspect.Responses,
	apply:     (*inject.Injector).ApplyResponses,
	terminate: (*inject.Injector).TerminateResponses,
	history:   (*pipeline).prepareRecord,
}
