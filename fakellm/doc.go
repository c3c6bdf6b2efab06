// Package fakellm is a scripted, in-process LLM server that speaks the wire
// dialects of the servers loopguard fronts: OpenAI, vLLM, llama.cpp and
// Ollama chat completions; Responses, Anthropic Messages, Ollama's own API,
// Gemini and Code Assist by their rules; raw bytes for anything else
// (broken streams).
//
// A Server plays a Script: chat completion requests get the script's
// responses in order, or the first Rule whose matcher accepts the request.
// Each Response is rendered either as a JSON body or, when the request asks
// for "stream": true, as an SSE stream whose bytes follow the chosen
// server's serializer (key order, role chunk, tool-call delta shapes, usage
// chunk, in-band error form, [DONE] presence). The server records every
// request it received and the exact bytes of every response it sent, and
// notices when a peer closes a stream early, so the e2e tests can prove that
// loopguard is byte-for-byte transparent and cancels upstream work promptly.
//
// The Responses API's WebSocket mode is served too (GET …/responses with
// Upgrade: websocket): each response.create message is answered by the
// script as the POST it stands for, one message per event, with the
// conversation kept on the socket (previous_response_id); RefuseSockets
// answers the upgrade 426 instead.
//
// fakellm is an ordinary package (net/http and a WebSocket library, no test
// dependencies) so
// that `loopguard demo` can use it as its built-in model. It never logs
// request content.
package fakellm
