// Package policy turns verdicts into actions.
//
// It runs twice in a chat request's flow: before inspection it finds the
// session (identity.go: Identify takes the client's id, else derives a key
// from the conversation's opening; Policy.Session tells apart reruns of one
// prompt) and loads the session's state from the Store;
// after inspection it walks the session's escalation ladder (warn ->
// constrain -> terminate by default) for the verdict's loop pattern
// (Policy.Decide) and records what was done. After a response the proxy
// records stream cuts (Policy.RecordCut), which the next request reports.
//
// The request history is the source of truth: a State keeps only what the
// history cannot show (ladder levels, interventions, cuts, overrides), so
// detection survives restarts and the store may fail: Decide then decides
// from the history alone and says so (Decision.StoreFailed).
//
// policy never reads or writes HTTP; it takes bodies as bytes and returns
// decisions. It imports inspect and none of proxy, inject or fasthttp.
package policy
