// Package e2e holds loopguard's end-to-end tests: real OpenAI clients (Go's
// sashabaranov/go-openai and openai/openai-go, and the Node `openai` package
// through node/client.mjs) talk to the scripted upstream in fakellm, directly
// and through a loopguard proxy over loopback, and the tests compare the
// bytes each side saw. llama_test.go does the same in front of llama.cpp's
// real llama-server (started by e2e/llamaserver). The package has no
// non-test code.
package e2e
