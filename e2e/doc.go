// Package e2e holds loopguard's end-to-end tests: real OpenAI clients (Go's
// sashabaranov/go-openai and openai/openai-go, and the Node `openai` package
// through node/client.mjs) talk to the scripted upstream in fakellm, directly
// and through a loopguard proxy over loopback, and the tests compare the
// bytes each side saw. llama_test.go does the same in front of llama.cpp's
// real llama-server (started by e2e/llamaserver). `loopguard run` is driven
// with a small agent of its own (testdata/runagent) and, when their binaries
// are named (the LOOPGUARD_E2E_* variables docs/testing.md lists), with real
// agent CLIs from npm, headless and offline, in the sign-ins their users
// use. The package has no non-test code.
package e2e
