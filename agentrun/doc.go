// Package agentrun guards one agent run: `loopguard run -- COMMAND`.
//
// It starts loopguard in-process on a free loopback port (or uses a running
// one), names the run's session in the base URL (/s/<id>/), points the
// base-URL variables the common agents read at it, runs the command with its
// own stdin, stdout, stderr, signals and exit code, and reads the session's
// record back from loopguard's admin API to summarise the run.
//
// agentrun never edits an agent's configuration files: for agents that read
// their base URL only from there, it prints the one setting to add.
package agentrun
