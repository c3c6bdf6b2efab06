// Package inspect decides whether an agent is looping.
//
// It is step 2 of a chat request's flow (proxy -> policy -> inspect -> inject):
// it builds a Trajectory from a chat request's message history, runs the
// detector families of DESIGN.md section 3 over it and aggregates their scores
// into a Verdict. On the response side, Degeneration watches streamed text for
// repetition as it passes.
//
// inspect is pure computation over bytes: it never touches the network, the
// session store or the request being forwarded, and it imports none of
// loopguard's other packages.
package inspect
