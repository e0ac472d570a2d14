// Package runnerkit is what the agent runners (claude, codex) share: the
// conversation split into the CLI's instructions and its prompt (earlier
// turns in a <conversation_history> block when no session holds them),
// the decoding of whole-number sandbox arguments, and the error for a
// CLI's output that ended before its result.
//
// Concurrency: its functions hold no state; an IncompleteError is a value.
package runnerkit
