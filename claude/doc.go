// Package claude runs the Claude Code CLI: it builds argv, env and stdin for
// one run and parses the CLI's stream-json output into executor events and a
// completion. The parser is a pure function of the CLI's stdout.
//
// Concurrency: a Runner holds no per-run state and is safe for concurrent
// use; each Parse call owns its reader.
package claude
