// Package intercept is the forward proxy of `loopguard run`: the agent's
// HTTPS_PROXY. It answers only requests that carry the run's credential,
// tunnels every CONNECT byte for byte, except those to a model host, whose
// TLS it terminates with a certificate signed by a CA made for the run, so
// that the agent's model calls can be handed, decrypted, to the proxy's
// pipeline (Listener) with the host they were meant for.
//
// The CA's private key lives only in memory and dies with the run; the CA
// is constrained to the hosts it intercepts. intercept never reads an HTTP
// request inside an intercepted connection: it does the handshake and hands
// the connection over.
package intercept
