// Package inject rewrites chat requests and writes loopguard's own answers.
//
// It is the last step before the upstream: given the action policy chose and
// the verdict's evidence, it patches the request body with sjson (a warning, a
// <loop-recovery> block, a collapsed history), leaving every other byte as it
// was, or renders the LOOP_DETECTED response that ends the agent's loop without
// calling the upstream. inject never touches the network.
package inject
