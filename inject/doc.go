// Package inject rewrites requests (chat completions, Responses, Anthropic
// Messages) and writes loopguard's own answers.
//
// It is the last step before the upstream: given the action policy chose and
// the verdict's evidence, it patches the request body (a warning, a
// <loop-recovery> block, a collapsed history), leaving every other byte as it
// was, or renders the LOOP_DETECTED response that ends the agent's loop without
// calling the upstream.
//
// Bodies are read with gjson and patched at the offsets gjson reports: an
// insertion copies the body once around the inserted bytes, and a collapse
// sets the history array (messages, or a Responses input) assembled from the
// kept elements' original bytes with sjson. Nothing untouched is re-encoded.
//
// inject never touches the network, keeps no state between requests and
// imports no loopguard package but inspect (for the verdict's types). The
// proxy turns policy's decision into an Edit or a Loop; errors mean "send the
// original request" (fail open).
package inject
