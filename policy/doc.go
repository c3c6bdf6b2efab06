// Package policy turns verdicts into actions.
//
// It runs twice in a chat request's flow: before inspection it derives the
// session key and loads the session's state from the Store; after inspection
// it walks the session's escalation ladder (warn -> constrain -> terminate by
// default) for the verdict's loop pattern and records what was done. policy
// never reads or writes HTTP; it takes bodies as bytes and returns decisions.
package policy
