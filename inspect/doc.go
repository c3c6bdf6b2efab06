// Package inspect decides whether an agent is looping.
//
// It is step 2 of a chat request's flow (proxy -> policy -> inspect -> inject):
// it builds a Trajectory from a chat request's message history, runs the
// detector families of docs/design.md section 3 over it and aggregates their scores
// into a Verdict. On the response side, Degeneration watches streamed text for
// repetition as it passes.
//
// Files: parse.go and adapter_*.go read the wire APIs' histories (the
// registry's, internal/wireapi) into
// a Trajectory (session_cache.go resumes from the last turn's); normalize.go
// and errorclass.go make results comparable; one file per detector family
// (repetition.go, cycle.go, drift.go, sameresult.go, errorcycle.go,
// whackamole.go, testfix.go, editundo.go with restore.go, outputrep.go,
// summaryloop.go) with similarity.go and progress.go shared among them;
// engine.go runs them and aggregates; degeneration.go and loose.go watch
// streamed text.
//
// inspect is pure computation over bytes: it never touches the network, the
// session store or the request being forwarded, and it imports none of
// loopguard's other packages but leaf ones under internal/ (rawjson, and
// wireapi, the registry of wire APIs).
package inspect
