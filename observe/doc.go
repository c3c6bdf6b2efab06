// Package observe makes loopguard's work visible: Prometheus metrics, one
// structured log event per detection and intervention, a bounded in-memory
// record of recent sessions with their timelines and recovery accounting,
// and the admin API and live dashboard served under /loopguard/.
//
// It runs beside the request flow, never in it: the proxy hands it plain
// values after each decision (Observer.Request) and after each response
// (Observer.StreamEnd), and it never changes a request or an answer.
// Everything on that path is bounded and allocation-free once a session is
// known, so observing costs well under a microsecond per request.
//
// Files: metrics.go and labels.go (Prometheus), observer.go (the entry
// points the proxy calls), recorder.go (the LRU of sessions and their
// timelines), stats.go (per-minute counts), recovery.go (did the loop come
// back after an intervention), query.go (what the admin API reads),
// cluster.go (one view over several replicas), admin.go and static/ (the
// admin API and dashboard), redact.go.
//
// observe never logs prompts, tool arguments or results unless
// Options.LogContent is set; the timeline keeps tool names and call
// fingerprints, not arguments. It imports policy and inspect for their value
// types, and net/http only for the admin handler; it never imports fasthttp
// (the proxy mounts Admin with fasthttpadaptor).
package observe
