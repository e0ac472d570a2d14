// Package cursor runs Cursor's CLI (cursor-agent) as agentbox's second
// runner, with the same event vocabulary as package claude.
//
// Concurrency: a Runner holds no per-run state and is safe for concurrent
// use; each Parse call owns its reader.
package cursor
