// Package judge is loopguard's optional LLM judge: after a turn has been
// forwarded, it may ask a model whether the agent is stuck, from a compact
// digest of the trajectory, for the loops no rule can see (the same failing
// idea retried in other words and with other commands).
//
// It never sits on a request's path. The proxy asks Due (a map lookup) and,
// only when a check is due, builds the digest and hands it to Submit, which
// queues it without waiting; a bounded pool of workers calls the model and
// reports each outcome to the proxy's hook, which stores a verdict for the
// session's next request. A full queue, a spent budget, a timeout, an error
// or an unreadable answer changes nothing: the job is dropped and counted.
//
// judge never logs: the digest and the model's answer hold the session's
// content, and they go nowhere but to the configured endpoint.
package judge
