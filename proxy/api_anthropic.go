package proxy

import (
	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
)

// anthropicAPI is Anthropic Messages (POST /v1/messages), which Claude Code
// speaks: every request carries the whole history.
var anthropicAPI = &wireAPI{
	name:      inspect.AnthropicMessages,
	apply:     (*inject.Injector).ApplyAnthropic,
	terminate: (*inject.Injector).TerminateAnthropic,
}
