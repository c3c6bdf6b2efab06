package proxy

import (
	"github.com/loopguard/loopguard/inject"
	"github.com/loopguard/loopguard/inspect"
)

// chatAPI is OpenAI's chat completions (POST /v1/chat/completions), which
// most servers speak: every request carries the whole history.
var chatAPI = &wireAPI{
	name:      inspect.ChatCompletions,
	apply:     (*inject.Injector).Apply,
	terminate: (*inject.Injector).Terminate,
}
